"""GPT-2 and BERT written plainly in PyTorch from Hugging Face's weight names, and AmoebaNet
(benchmarks/amoebanet_torch_bench.py's network): the independent reference of
tests/models/torch_reference_test.cpp (NOTE [Models against PyTorch] there).

    /usr/bin/python3 tests/models/torch_reference.py gpt2|bert|amoebanet FILE.safetensors
    /usr/bin/python3 tests/models/torch_reference.py write-hf gpt2|bert DIR

FILE holds the model's weights under Hugging Face's names, its inputs, and what Trident computed
from them: the outputs ("out.*") and every parameter's gradient ("grad." + name). This script
recomputes both in f64 with torch.nn.functional, prints the largest normwise relative difference
of each output and gradient, and exits 0 when all are below the tolerance, 1 otherwise (2 for a
malformed file). Files are read and written by tests/safetensors_io.py (by hand: Debian has no
Python safetensors package).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_io import load, save  # noqa: E402  (tests/safetensors_io.py)

TOL = 1e-10  # f64: the two sides sum in different orders; rounding leaves ~1e-14
# The bias of the keys adds q . b to every score of a query's row, which softmax ignores: its
# gradient is exactly zero, and what either side computes is rounding noise, whose relative
# difference means nothing. Those tensors must instead stay below ZERO_TOL times the largest
# gradient of the same keys' weight. (GPT-2's fused c_attn.bias holds the keys' part beside the
# queries' and values', so its normwise comparison is meaningful as it is.)
EXACT_ZERO = "attention.self.key.bias"
ZERO_TOL = 1e-12


def write_hf(model, folder):
    """A checkpoint folder as the hub holds one (model.safetensors in f32, config.json) with
    random weights, and reference.safetensors: inputs and the outputs computed here in f64 from
    those f32 weights. GPT-2 as the original openai-community/gpt2 file: GPT2Model's names
    without "transformer.", the attention-mask buffers "h.{i}.attn.bias" and
    "h.{i}.attn.masked_bias". BERT as the files converted from Google's checkpoints: LayerNorm
    "gamma"/"beta", the "bert.embeddings.position_ids" buffer, the tied decoder stored too."""
    g = torch.Generator().manual_seed(20261130)
    rand = lambda *shape, scale=0.3, base=0.0: (base + scale * torch.randn(*shape, generator=g, dtype=torch.float64)).float()
    if model == "gpt2":
        L, H, C, V, T = 2, 2, 16, 61, 16
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L, "n_head": H, "n_embd": C,
               "vocab_size": V, "n_positions": T, "n_ctx": T, "layer_norm_epsilon": 1e-5,
               "activation_function": "gelu_new", "torch_dtype": "float32"}
        W = {"wte.weight": rand(V, C), "wpe.weight": rand(T, C), "ln_f.weight": rand(C, scale=0.2, base=1.0), "ln_f.bias": rand(C, scale=0.2)}
        for l in range(L):
            p = f"h.{l}."
            for ln in ("ln_1", "ln_2"):
                W[p + ln + ".weight"], W[p + ln + ".bias"] = rand(C, scale=0.2, base=1.0), rand(C, scale=0.2)
            for name, (i, o) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}.items():
                W[p + name + ".weight"], W[p + name + ".bias"] = rand(i, o), rand(o, scale=0.2)
            W[p + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            W[p + "attn.masked_bias"] = torch.tensor(-1e4)
        ids = torch.randint(0, V, (2, T), generator=g)
        ref = {("transformer." + k): v.double() for k, v in W.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        ref.update({"in.input_ids": ids, "in.targets": torch.full_like(ids, -100)})
        outs, _ = gpt2(ref, {"n_layer": L, "n_head": H, "n_embd": C, "vocab_size": V, "eps": 1e-5})
        reference = {"in.input_ids": ids, "out.logits": outs["out.logits"]}
    else:
        L, H, C, I, V, T = 2, 2, 16, 32, 37, 16
        cfg = {"model_type": "bert", "architectures": ["BertForPreTraining"], "vocab_size": V, "hidden_size": C,
               "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": I, "max_position_embeddings": T,
               "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0,
               "torch_dtype": "float32"}
        W = {}
        lin = lambda name, i, o: W.update({name + ".weight": rand(o, i), name + ".bias": rand(o, scale=0.2)})
        norm = lambda name: W.update({name + ".gamma": rand(C, scale=0.2, base=1.0), name + ".beta": rand(C, scale=0.2)})
        e = "bert.embeddings."
        W[e + "word_embeddings.weight"], W[e + "position_embeddings.weight"] = rand(V, C), rand(T, C)
        W[e + "token_type_embeddings.weight"] = rand(2, C)
        W[e + "position_ids"] = torch.arange(T).view(1, T)
        norm(e + "LayerNorm")
        for l in range(L):
            p = f"bert.encoder.layer.{l}."
            for n in ("query", "key", "value"):
                lin(p + "attention.self." + n, C, C)
            lin(p + "attention.output.dense", C, C)
            norm(p + "attention.output.LayerNorm")
            lin(p + "intermediate.dense", C, I)
            lin(p + "output.dense", I, C)
            norm(p + "output.LayerNorm")
        lin("bert.pooler.dense", C, C)
        lin("cls.predictions.transform.dense", C, C)
        norm("cls.predictions.transform.LayerNorm")
        W["cls.predictions.bias"] = rand(V, scale=0.2)
        W["cls.predictions.decoder.weight"] = W[e + "word_embeddings.weight"].clone()
        lin("cls.seq_relationship", C, 2)
        ids = torch.randint(1, V, (2, 12), generator=g)
        ids[1, 9:] = 0
        mask = (ids != 0).long()
        types = torch.tensor([[0] * 6 + [1] * 6] * 2)
        ref = {k.replace(".gamma", ".weight").replace(".beta", ".bias"): v.double() for k, v in W.items()}
        ref.update({"in.input_ids": ids, "in.token_type_ids": types, "in.attention_mask": mask,
                    "in.mlm_labels": ids.clone(), "in.next_sentence_label": torch.tensor([0, 1])})
        outs, _ = bert(ref, {"n_layer": L, "n_head": H, "hidden_size": C, "vocab_size": V, "pad_token_id": 0, "eps": 1e-12})
        # Every position labelled: the MLM logits of all of them, [B * T, V] in row-major order.
        reference = {"in.input_ids": ids, "in.token_type_ids": types, "in.attention_mask": mask,
                     "out.mlm_logits": outs["out.mlm_logits"], "out.nsp_logits": outs["out.nsp_logits"]}
    save(f"{folder}/model.safetensors", W, {"format": "pt"})
    with open(f"{folder}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    save(f"{folder}/reference.safetensors", reference, {"written_by": "tests/models/torch_reference.py"})
    return 0


def heads(x, n_head):  # [B, T, C] -> [B, H, T, D]
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge(y):  # [B, H, T, D] -> [B, T, C]
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


def attention(q, k, v, n_head, causal, key_padding=None):
    q, k, v = heads(q, n_head), heads(k, n_head), heads(v, n_head)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    if key_padding is not None:
        s = s.masked_fill(key_padding, float("-inf"))
    return merge(s.softmax(dim=-1) @ v)


def gpt2(W, cfg):
    """Hugging Face's GPT2LMHeadModel: Conv1D weights stored [in, out], tied output layer."""
    ids, targets = W["in.input_ids"], W["in.targets"]
    C, n_head, eps, vocab = cfg["n_embd"], cfg["n_head"], cfg["eps"], cfg["vocab_size"]
    wte = W["transformer.wte.weight"]
    x = wte[ids] + W["transformer.wpe.weight"][: ids.shape[1]]
    for l in range(cfg["n_layer"]):
        p = lambda name: W[f"transformer.h.{l}.{name}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=2)
        x = x + attention(q, k, v, n_head, causal=True) @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    logits = x @ wte[:vocab].t()
    loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=-100)
    return {"out.logits": logits, "out.loss": loss.reshape(1)}, loss


def bert(W, cfg):
    """Hugging Face's BertForPreTraining: post-LayerNorm, exact GELU, nn.Linear weights [out, in],
    the MLM decoder tied to the word embeddings with its own bias, the next-sentence head."""
    ids, types, mask = W["in.input_ids"], W["in.token_type_ids"], W["in.attention_mask"]
    mlm_labels, nsp_label = W["in.mlm_labels"], W["in.next_sentence_label"]
    C, n_head, eps, vocab = cfg["hidden_size"], cfg["n_head"], cfg["eps"], cfg["vocab_size"]
    lin = lambda x, name: F.linear(x, W[name + ".weight"], W[name + ".bias"])
    ln = lambda x, name: F.layer_norm(x, (C,), W[name + ".weight"], W[name + ".bias"], eps)
    e = "bert.embeddings."
    words = W[e + "word_embeddings.weight"]
    x = F.embedding(ids, words, padding_idx=cfg["pad_token_id"])  # the padding row gets no gradient from lookups
    x = x + W[e + "position_embeddings.weight"][: ids.shape[1]] + W[e + "token_type_embeddings.weight"][types]
    x = ln(x, e + "LayerNorm")
    padding = (mask == 0)[:, None, None, :]  # keys at padding tokens take no attention
    for l in range(cfg["n_layer"]):
        p = f"bert.encoder.layer.{l}."
        q, k, v = (lin(x, p + "attention.self." + n) for n in ("query", "key", "value"))
        a = attention(q, k, v, n_head, causal=False, key_padding=padding)
        x = ln(lin(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(lin(h, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = torch.tanh(lin(x[:, 0], "bert.pooler.dense"))
    t = ln(F.gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    # Trident runs the MLM head on the labelled positions only, in row-major order (models/bert.h).
    labelled = mlm_labels != -100
    mlm_logits = (t @ words[:vocab].t() + W["cls.predictions.bias"][:vocab])[labelled]
    nsp_logits = lin(pooled, "cls.seq_relationship")
    loss = F.cross_entropy(mlm_logits, mlm_labels[labelled]) + F.cross_entropy(nsp_logits, nsp_label)
    return {"out.mlm_logits": mlm_logits, "out.nsp_logits": nsp_logits, "out.loss": loss.reshape(1)}, loss


def amoebanet(W, cfg):
    """AmoebaNet: benchmarks/amoebanet_torch_bench.py's network (the project's second
    implementation of the TensorFlow reference's cells), in training mode (batch statistics).
    Its parameters and batch-norm buffers are listed in the same order as Trident's, so the
    file numbers them ("p.NNN.<Trident's name>"); shapes are checked one by one."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    import amoebanet_torch_bench as twin

    m = twin.AmoebaNet("B" if cfg["genotype_b"] else "D", cfg["cells"], cfg["filters"], cfg["classes"], cfg["image"],
                       dropout=0.0).double().train()
    ours = sorted(k for k in W if k.startswith("p."))
    theirs = list(m.named_parameters())
    if len(ours) != len(theirs):
        raise SystemExit(f"{len(ours)} parameters from Trident, {len(theirs)} in the PyTorch AmoebaNet")
    names = {}
    with torch.no_grad():
        for k, (name, p) in zip(ours, theirs):
            if W[k].shape != p.shape:
                raise SystemExit(f"{k}: shape {list(W[k].shape)} from Trident, {list(p.shape)} for {name} here")
            p.copy_(W[k])
            names[k] = p
    # NOTE [AmoebaNet multiply-adds]: counted here from what each convolution and linear layer
    # actually produced in the forward, per image.
    macs = [0]

    def count(mod, inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            macs[0] += out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, torch.nn.Linear):
            macs[0] += out.numel() * mod.in_features

    hooks = [mod.register_forward_hook(count) for mod in m.modules() if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear))]
    images = W["in.images"]
    logits = m(images)
    for h in hooks:
        h.remove()
    loss = F.cross_entropy(logits, W["in.labels"])
    outs = {"out.logits": logits, "out.loss": loss.reshape(1),
            "out.multiply_adds": torch.tensor([macs[0] / images.shape[0]], dtype=torch.float64)}
    # Batch-norm running statistics after this one training step, in the same order.
    for kind in ("running_mean", "running_var"):
        bufs = [b for n, b in m.named_buffers() if n.endswith(kind)]
        for i, b in enumerate(bufs):
            outs[f"out.{kind}.{i:03d}"] = b
    return outs, loss, names


def rel(a, b):
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "write-hf" and sys.argv[2] in ("gpt2", "bert"):
        return write_hf(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 3 or sys.argv[1] not in ("gpt2", "bert", "amoebanet"):
        print(__doc__)
        return 2
    W = load(sys.argv[2])
    cfg = {k[len("cfg.") :]: W[k].item() for k in W if k.startswith("cfg.")}
    cfg = {k: (v if k == "eps" else int(v)) for k, v in cfg.items()}
    if sys.argv[1] == "amoebanet":
        outs, loss, params = amoebanet(W, cfg)
    else:
        params = {k: v.clone().requires_grad_(True) for k, v in W.items() if not k.startswith(("in.", "out.", "grad.", "cfg."))}
        inputs = {k: v for k, v in W.items() if k.startswith(("in.", "cfg."))}
        outs, loss = (gpt2 if sys.argv[1] == "gpt2" else bert)({**params, **inputs}, cfg)
    loss.backward()
    worst, failed = 0.0, []
    checks = [(k, outs[k].detach(), W[k]) for k in outs]
    checks += [("grad." + k, p.grad if p.grad is not None else torch.zeros_like(p), W["grad." + k]) for k, p in params.items()]
    for name, ref, trident in checks:
        if ref.shape != trident.shape:
            print(f"{name}: shape {list(trident.shape)} from Trident, {list(ref.shape)} here")
            failed.append(name)
            continue
        if name.endswith(EXACT_ZERO):
            # Both sides hold rounding noise around 0: bounded by the key weights' gradient scale.
            bound = ZERO_TOL * params[name[len("grad.") : -len("bias")] + "weight"].grad.abs().max().item()
            a, b = trident.abs().max().item(), ref.abs().max().item()
            print(f"{name}: zero in exact arithmetic; largest element {a:.3e} (Trident), {b:.3e} (PyTorch), bound {bound:.3e}")
            if not (a <= bound and b <= bound):
                failed.append(name)
            continue
        r = rel(trident, ref)
        worst = max(worst, r)
        if not r <= TOL:
            failed.append(name)
            print(f"  Trident {trident.flatten()[:6].tolist()}\n  PyTorch {ref.flatten()[:6].tolist()}")
        print(f"{name}: normwise relative difference {r:.3e}")
    print(f"{sys.argv[1]}: {len(checks)} tensors compared, worst {worst:.3e}, tolerance {TOL:.0e}: " + ("OK" if not failed else "FAILED " + " ".join(failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
