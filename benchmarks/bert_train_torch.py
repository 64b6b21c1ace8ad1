"""The model of benchmarks/bert_train_bench.cpp written plainly in PyTorch (1.13, CPU): BERT
pre-training (Hugging Face's BertForPreTraining: post-LayerNorm layers, exact GELU, word +
position + segment embeddings, pooler, masked-LM head with the decoder tied to the word
embeddings, next-sentence head) with vocabulary 30522, 4 layers, 4 heads, hidden 256,
intermediate 1024, sequences of 128 tokens, batch 8, AdamW, no dropout. Padding keys are masked
out of attention by an additive mask, as Hugging Face does; the masked-LM head runs on the
masked positions only (gathered first, as Trident does), so both sides do the same arithmetic.
The batch is bench_bert_train's formula. Prints JSON {"tokens_per_s", "step_ms", "threads"}:
the median step time.

    python3 benchmarks/bert_train_torch.py THREADS [STEPS] [fp32|bf16]

bf16 runs the forward under torch.autocast("cpu", torch.bfloat16).
"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, V, L, H, C, I = 8, 128, 30522, 4, 4, 256, 1024
EPS = 1e-12


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.attn_out = nn.Linear(C, C)
        self.ln_1 = nn.LayerNorm(C, eps=EPS)
        self.inter = nn.Linear(C, I)
        self.out = nn.Linear(I, C)
        self.ln_2 = nn.LayerNorm(C, eps=EPS)

    def forward(self, x, bias):
        b, t, _ = x.shape
        q, k, v = ((f(x).view(b, t, H, C // H).transpose(1, 2)) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // H) + bias
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, C)
        x = self.ln_1(self.attn_out(y) + x)
        return self.ln_2(self.out(F.gelu(self.inter(x))) + x)


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(V, C, padding_idx=0)
        self.position = nn.Embedding(T, C)
        self.token_type = nn.Embedding(2, C)
        self.ln = nn.LayerNorm(C, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.pooler = nn.Linear(C, C)
        self.transform = nn.Linear(C, C)
        self.transform_ln = nn.LayerNorm(C, eps=EPS)
        self.decoder_bias = nn.Parameter(torch.zeros(V))
        self.nsp = nn.Linear(C, 2)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, types, mask, labels, nsp_labels):
        t = ids.shape[1]
        x = self.ln(self.word(ids) + self.position(torch.arange(t)) + self.token_type(types))
        bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        where = labels.view(-1) != -100
        h = x.reshape(-1, C)[where]
        h = self.transform_ln(F.gelu(self.transform(h)).float())  # (1.13's CPU autocast leaves LayerNorm alone)
        logits = h @ self.word.weight.t() + self.decoder_bias
        mlm = F.cross_entropy(logits, labels.view(-1)[where])
        return mlm + F.cross_entropy(self.nsp(pooled), nsp_labels)


def batch():
    ids = torch.randint(1, V, (B, T))
    mask = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        n = T - 8 * b
        mask[b, :n] = 1
        types[b, n // 2:n] = 1
        for p in range(1, n):
            if (7 * p + 3 * b) % 20 < 3:
                labels[b, p] = ids[b, p]
    return ids, types, mask, labels, torch.arange(B) % 2


def main():
    threads = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    bf16 = len(sys.argv) > 3 and sys.argv[3] == "bf16"
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    data = batch()
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(*data)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"tokens_per_s": B * T / med, "step_ms": med * 1e3, "threads": torch.get_num_threads(),
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "masked": int((data[3] != -100).sum()), "last_loss": loss.item()}))


if __name__ == "__main__":
    main()
