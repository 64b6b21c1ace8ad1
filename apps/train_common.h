// What train_gpt2, train_bert and train_imagenet share: the common command-line options (and
// --config FILE.json with flags overriding it; apps/train_options.cpp), the training loop over a
// models::LayeredModel (gradient accumulation, mixed precision, learning-rate schedule,
// evaluation, checkpoints, exact resume; apps/train_common.cpp), the live progress line, metrics
// as JSON lines and the final loss plot.
//
// NOTE [Training apps]: a step takes one loader batch of batch * grad_accum examples, splits it
// into grad_accum micro-batches (models::Batch::split) and weights each micro-batch's loss by
// the target counts of the whole batch (LayeredModel::loss_counts), so the accumulated gradient
// is exactly the gradient of the whole batch's mean loss. The checkpoint holds the model, the
// optimizer, the loss scaler, the default generator (dropout), the loader's position and, as
// "extra", {"model": <app's model name>, "config": <the model config's JSON>}: --resume refuses
// a checkpoint of another model, or of other sizes, in one line before touching anything.
// Everything a step depends on is restored, so a resumed run prints the losses of the
// uninterrupted one bit for bit (tests: apps.train_gpt2_exact_resume).
//
// NOTE [Parallel training apps]: `mpirun -np N train_gpt2 --dp N` (and train_bert). make_mesh()
// is the one place the apps turn --dp/--pp/--tp into a parallel::Mesh (launch_mesh: N must be
// dp x pp x tp); --tp N builds the model's splittable layers from the mesh's tp group
// (parallel/tensor_parallel; checkpoints: NOTE [Model-parallel training checkpoints]), with --sequence-parallel also splitting the
// LayerNorms and dropout along the sequence (the sequence length must divide by tp); --pp K trains through a
// parallel::pipeline::Pipeline (NOTE [Pipeline training apps]). --batch is per dp rank: a step's global batch is --batch x --grad-accum x --dp
// examples. Every rank reads the same shuffled order and keeps, of each global batch, the rows
// parallel::dp_batch_rows gives it (contiguous, in rank order), so the global batches are
// exactly those of a serial run with --batch multiplied by dp, whatever the dp size. The model
// is wrapped in parallel::DataParallel (or its optimizer in parallel::ZeroOptimizer under
// --zero, over the dp group; with --tp each tp index has its own ZeRO over its shards, and
// clipping sums the split parameters' squares over tp); --grad-accum runs all micro-batches but the last under no_sync. The loss counts of a
// step (NOTE [Training apps]) are summed over the dp ranks and divided by dp, so each rank's loss
// is its share of the global batch's mean loss times dp, and the averaged gradient is the global
// batch's; the printed loss is the dp average of the ranks' losses, the global batch's mean
// loss. Every dp rank draws the same dropout masks (from the same seed; each on its own rows), so
// rank 0's generators are every rank's and resume stays exact. World rank 0 alone prints, writes
// metrics, plots and the checkpoint (parallel/checkpoint.h: under --zero the gathered optimizer
// state); every rank reads the checkpoint back. Evaluation: NOTE [Evaluation over dp]
// (apps/evaluation.h).
//
// NOTE [Optimizer in the apps]: --optimizer adamw (betas 0.9 and --beta2, --eps), sgd
// (--momentum, Nesterov when it is positive; weight decay added to the gradient as PyTorch's
// SGD does) or rmsprop (AmoebaNet's optimizer in its paper: --rmsprop-alpha, --momentum, --eps,
// in PyTorch's form, eps outside the square root; nn/optim/rmsprop.h on translating TensorFlow's
// hyperparameters), all in two parameter groups: --weight-decay on matrices, embeddings and
// convolution kernels (dim >= 2), none on biases and normalization parameters (1-D). The same
// groups under --zero, --pp and --tp, and in checkpoints (their optimizer part is the serial
// optimizer's state dict whatever the layout).
//
// NOTE [Batch norm in the apps]: a model with BatchNorm2d layers (AmoebaNet) trains with each
// micro-batch (--batch rows; under --pp a pipeline micro-batch) normalized by its own
// statistics, as GPipe does, and the running statistics moved once per step by the whole
// global batch's mean and variance (NOTE [Deferred batch norm], nn/normalization.h), their
// totals summed over the dp ranks. So the running statistics, and the evaluations that use
// them, do not depend on --grad-accum, --dp or --pp, and every dp rank holds the same: a serial
// run with --batch b --grad-accum g x d trains as --dp d --batch b --grad-accum g does, and as
// --pp with micro-batches of b rows (tests: apps.train_imagenet_parallel).
//
// NOTE [Pipeline balance in the apps]: --pp-balance parameters (the default) cuts the layers into
// stages of about equal parameter counts, which evens out the memory of parameters, gradients
// and optimizer state; --pp-balance compute cuts by the model's own count of each layer's work,
// which evens out the stages' step times (GPipe balances by compute): train_imagenet counts each
// layer's multiply-adds per image (NOTE [AmoebaNet multiply-adds]; AmoebaNet's early cells work
// on large maps with few parameters: at pp = 4, AmoebaNet-D(18, 208) cut by parameters gives
// stage 0 64% of the work, cut by compute 24-26% to each stage); train_gpt2 its layers' model
// FLOPs per token (NOTE [MFU]: none for the embedding lookup, 6 per weight plus 12 T d of
// attention for a block, 6 per weight of the tied output layer for the head: by parameters the
// tied embedding makes the embedding layer as heavy as the head, so GPT-2 124M at pp = 4 cuts
// {1, 6, 6, 1}, a first stage that only looks up; by compute the first stage takes blocks too).
// train_bert the same by positions (the MLM head at the predicted ~15% only, the pooler and NSP
// head once per sequence). The losses do not depend on the cut.
//
// NOTE [Model-parallel training checkpoints]: under --tp and --pp (with or without --dp,
// --zero, --sequence-parallel) --ckpt-dir/--resume write and read layout-independent checkpoints
// (parallel/checkpoint.h): the parameters and AdamW's moments of split layers are gathered over
// tp into the serial model's full tensors under its names (NOTE [Layout-independent
// checkpoints]), every stage's parameters and optimizer state are assembled into the whole
// model's (NOTE [Pipeline checkpoints]), so a run at --tp 2 or --pp 2 writes the directory a
// serial run writes (plus "tp", "pp" and generator offsets in trainer.json's extra), and any
// checkpoint resumes at any --tp and --pp (the model config and global batch must match, as
// always). Dropout streams: the default generator is world rank 0's, as serially; under --tp the
// replicated sites draw from it alike on every tp rank, and the split regions (attention and MLP
// activations; with --sequence-parallel also the residual stream) from a per-tp-rank stream
// seeded seed + 2718 + tp rank; under --pp each stage draws its own layers' masks from its own
// default generator. So the checkpoint also records, per stage, the default generator's offset
// (--pp) and the split stream's (--tp; every tp rank of a stage draws equally many values, so tp
// rank 0's is every tp rank's), and a resume at the same --tp and --pp restores them: bit for bit
// the uninterrupted run, dropout included. Resumed at another layout (or from a serial
// checkpoint), every rank starts from the saved default generator and fresh split streams: with
// dropout > 0 the masks then differ from the uninterrupted run's (as they differ between layouts
// from the first step), so the losses continue statistically, not exactly; with dropout 0 they
// continue exactly at the same layout and within rounding (the sums' order changes with the
// layout) at another (tests: apps.train_gpt2_dp, apps.train_gpt2_pp).
//
// NOTE [Pipeline training apps]: `mpirun -np K train_gpt2 --pp K --micro-batches M
// --pp-schedule gpipe|1f1b --remat always|except_last|never [--pp-chunks V]` (and train_bert;
// --pp-schedule, as --schedule is the learning-rate schedule; --pp-chunks V > 1 the interleaved
// schedule, NOTE [Interleaved schedule], M a multiple of K), composed with --dp and --tp (world = dp x pp x tp:
// with --tp every stage's layers are split over the mesh's tp group by
// parallel::tp::TensorParallelLayers, and the pipeline's transfers link the ranks of one tp index,
// which hold the same full activations). --precision bf16 runs each step inside the autocast
// scope (NOTE [Autocast state] in autograd/grad_mode.h: backward and re-materialization cast as
// the forward did); fp16 too, its loss scale applied by the last stage to each micro-batch's
// loss (Pipeline::set_loss_scale) and the unscaled gradients' finiteness agreed over the world
// (nn::GradScaler::unscale_ with all_finite), since an overflow in one stage's gradients need not
// reach the other stages', and every rank must skip that step and back off alike. Every rank
// builds its stage of the model from the seed (cut_for_stage, NOTE [Stage-only build]) and a
// parallel::pipeline::Pipeline over the mesh's pp group (and its dp group) takes that cut
// (NOTE [Pipeline balance in the apps]); every pp rank of a dp index
// reads the same rows. A step's batch (--batch x --grad-accum rows per dp rank) goes to
// Pipeline::step with the global batch's loss counts (as above), which cuts it into M
// micro-batches, runs the schedule, sums the tied embedding's gradient between its stages and
// returns the global batch's mean loss (averaged over dp) on every rank (printed by world rank
// 0); the stage's gradients are averaged over dp by DataParallel, started after the rank's last
// backward pass (NOTE [Overlapped pipeline gradients]), or reduce-scattered by ZeRO-1 from the
// same point. The optimizer (--optimizer, the same groups) holds this stage's parameters only; gradient
// clipping uses the whole model's norm (parallel/pipeline/grad_norm.h: squares all-reduced over
// pp, and first over tp for split parameters; tied parameters counted once), so the losses equal
// serial training's. Each rank holds its stage's tensors only (NOTE [Stage-only model]) and
// builds only those (NOTE [Stage-only build], cut_for_stage).
// Evaluation runs the validation batches through the stages (apps/evaluation.h), so world rank
// 0 prints what a serial run prints. At the end every run prints the last step's measured bubble
// beside (K-1)/(M+K-1) and each stage's peak activation bytes; --trace FILE writes that step's
// Chrome trace. With --zero each stage's optimizer is sharded over its dp group (NOTE [ZeRO-1
// over pipeline stages]): the pipeline leaves the gradients local, ZeRO reduce-scatters them once
// per step and clips by the whole model's norm. Refused in one line: M not dividing the step's
// batch.
// Checkpoints: NOTE [Model-parallel training checkpoints].
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "models/layer_list.h"
#include "models/memory_estimate.h"
#include "nn/init.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel/tp_layers.h"

namespace trident::apps {

struct TrainOptions {
  std::string device = "cpu";  // cpu | cuda | cuda:N (NOTE [Device in the apps], apps/device.h)
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (autocast; fp16 with a GradScaler)
  double initial_loss_scale = 0;   // fp16: the GradScaler's starting scale; 0: 2^16 (PyTorch's and nn::GradScaler's)
  double peak_tflops = 0;          // the GPU's dense peak for MFU (NOTE [MFU]); 0: TRIDENT_PEAK_TFLOPS, else the table
  int64_t batch = 8;               // examples per micro-batch
  int64_t grad_accum = 1;          // micro-batches per optimizer step
  double lr = 1e-3;
  std::string optimizer = "adamw";  // adamw | sgd | rmsprop (NOTE [Optimizer in the apps])
  double beta2 = 0.95;              // AdamW's second-moment decay (GPT-2's and BERT's 0.95)
  double eps = 1e-8;                // AdamW's and RMSProp's epsilon
  double momentum = 0.9;            // SGD's (Nesterov) and RMSProp's momentum
  double rmsprop_alpha = 0.9;       // RMSProp's squared-gradient decay (AmoebaNet's 0.9)
  std::string schedule = "cosine";  // cosine | linear | constant
  int64_t warmup = 0;
  double min_lr_fraction = 0.1;  // cosine/linear end at lr * this
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: off
  int64_t steps = 0;       // 0: from --epochs
  double epochs = 1;
  double time_limit = 0;  // seconds; > 0: stop after the first step past it (then evaluate, checkpoint)
  int64_t eval_every = 0;  // 0: only before and after training; -1: never
  int64_t eval_batches = 20;
  int64_t log_every = 10;  // a line (not a tty) or a metrics record every N steps
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  std::string resume;
  uint64_t seed = 1234;
  int threads = 0;  // 0: as many as the machine has
  int workers = 1;  // loader threads
  std::string metrics;  // JSON lines; default <ckpt-dir>/metrics.jsonl when --ckpt-dir is given
  std::string plot;     // PNG; default beside the metrics file
  bool dry_run = false;
  bool profile = false;  // time each op over the training steps, print the largest (NOTE [Op profiler])
  std::string config;  // the JSON file --config read (already applied)
  // NOTE [Parallel training apps]
  int dp = 1;          // data-parallel ranks (mpirun -np must be dp x pp x tp)
  int pp = 1;          // pipeline stages (NOTE [Pipeline training apps])
  int tp = 1;          // tensor-parallel ranks (Megatron-LM's split)
  bool zero = false;   // ZeRO-1: the optimizer state sharded over the dp ranks
  bool sequence_parallel = false;  // with --tp: NOTE [Sequence parallelism] (parallel/tensor_parallel/sequence_parallel.h)
  // NOTE [Pipeline training apps]: only with --pp > 1.
  int64_t micro_batches = 1;          // the pipeline's micro-batches per step
  std::string pp_schedule = "gpipe";  // gpipe | 1f1b
  int64_t pp_chunks = 1;              // model chunks per rank: NOTE [Interleaved schedule]
  std::string remat = "except_last";  // always | except_last | never
  std::string pp_balance = "parameters";  // parameters | compute (NOTE [Pipeline balance in the apps])
  std::string trace;                  // Chrome trace (JSON) of the last step
};

// Adds the common options to `app`. Call parse() instead of CLI11_PARSE.
void add_train_options(CLI::App& app, TrainOptions& o);

// Parses argv: when it has --config FILE, the file's keys (a JSON object) become options first
// ("grad_accum": 4 is --grad-accum 4; a nested object, e.g. "model": {...}, is passed as its JSON
// text; true is a flag) and the command line's own flags after, overriding them. Returns -1 when
// the program should go on, or the exit code (--help: 0; bad input: the error printed, 2).
int parse(CLI::App& app, int argc, char** argv);

// Checks the device (apps/device.h: a GPU must be there when asked for),
// precision, schedule and sizes; sets the thread count. Throws trident::Error.
void check_train_options(const TrainOptions& o);

// The mesh of this run, dp x pp x tp over the processes mpirun started (a world of one without a
// launcher): the one place the apps build it, once, before the model. Collective. Errors (the
// same on every rank): sizes that do not multiply to the number of processes.
parallel::Mesh make_mesh(const TrainOptions& o);

// The model, from build(): under --resume every tensor is then loaded from the checkpoint
// (strictly: a missing one is an error), so build() runs under nn::init::SkipDrawsGuard and
// computes no initial values (NOTE [Skipped draws]; the generators still end where a full build
// leaves them); otherwise as it is.
template <typename Build>
decltype(auto) build_model(const TrainOptions& o, Build&& build) {
  const nn::init::SkipDrawsGuard skip(!o.resume.empty());
  return build();
}

// NOTE [Stage-only build] (models/layer_list.h): under --pp the cut of the model's layer list into
// the mesh's pp stages by `costs()` (one cost per layer: its parameters or its compute, NOTE
// [Pipeline balance in the apps]; parallel::pipeline::balance_by_costs; --pp-chunks V cuts pp x V
// virtual stages, NOTE [Interleaved schedule]), and the layers of this
// rank's stage (its V chunks), which it builds alone (the model's stage-only constructor) while every other rank
// builds its own; the balance goes to the Pipeline (TrainTask::pp_balance), which then finds its
// stage built and the rest placeholders. Without --pp: no balance (costs() is not called) and
// every layer.
struct StageCut {
  std::vector<int64_t> balance;
  models::LayerSelection keep = models::kAllLayers;
};
StageCut cut_for_stage(const TrainOptions& o, const parallel::Mesh& mesh, const std::function<std::vector<double>()>& costs);
// This rank's device (NOTE [Device in the apps], NOTE [Rank to GPU]), made the current CUDA
// device when it is a GPU. Collective (the node-local rank).
Device run_device(const TrainOptions& o, const parallel::Mesh& mesh);
// Under --tp > 1 the factory of the model's splittable layers on the mesh's tp group (Megatron-LM's
// split, with --sequence-parallel), to put in the model's config, their collectives over an NCCL
// communicator of the same ranks under --device cuda (NOTE [Model parallelism on GPUs]); null at
// tp = 1.
std::shared_ptr<parallel::tp::TensorParallelLayers> tensor_parallel_layers(const TrainOptions& o,
                                                                           const parallel::Mesh& mesh);

// Whether this process is world rank 0, the one that prints and writes (true before make_mesh).
bool is_lead();
// printf on world rank 0 only.
void say(const char* format, ...) __attribute__((format(printf, 1, 2)));
// The autocast dtype of --precision bf16 or fp16 (fp32 runs with a disabled guard).
DType autocast_dtype(const std::string& precision);

// What train() needs from an application.
struct TrainTask {
  std::string app;         // "train_gpt2": prefixes messages
  std::string model_name;  // "gpt2": stored in checkpoints
  std::string config_json; // the model config (checked on resume)
  models::LayeredModel* model = nullptr;
  std::shared_ptr<const data::Dataset> train, val;  // val may be null
  // Loader example -> the model's named inputs.
  std::function<models::Batch(const data::Example&)> to_batch;
  // Tokens in a batch, for tokens/s.
  std::function<int64_t(const models::Batch&)> tokens;
  // Model FLOPs of a training step on this batch (NOTE [MFU] in apps/mfu.h), given the batch's
  // model.loss_counts (taken once per step by the loop), for the MFU a GPU run prints and
  // records; empty: none.
  std::function<double(const models::Batch&, const std::vector<double>& counts)> flops;
  // Evaluation metrics of outputs on a batch, summed over batches and divided by the total
  // weight: each returns {name -> (sum, weight)}. The perplexities are exp of the means named
  // in `perplexity_of` ("val_ppl" of "val_loss").
  std::function<std::map<std::string, std::pair<double, double>>(const models::Activations&, const models::Batch&)> eval;
  std::map<std::string, std::string> perplexity_of;
  // What task.tokens counts, for the progress line and the metrics: "tok/s" and "tokens_per_s",
  // or an image model's "img/s" and "images_per_s".
  std::string rate_unit = "tok/s", rate_key = "tokens_per_s";
  // Called on world rank 0 after the last evaluation with its metrics (empty when there was no
  // evaluation) and the last step: an app's own summary line, printed last.
  std::function<void(const std::map<std::string, double>&, int64_t)> summary;
  // NOTE [Pipeline balance in the apps]: under --pp, the layers per stage the app chose (it may
  // have built only its stage: cut_for_stage, NOTE [Stage-only build]); empty: the Pipeline cuts by
  // parameter count itself, and --pp-balance compute is refused.
  std::vector<int64_t> pp_balance;
  // The mesh from make_mesh(); null: train() makes it.
  const parallel::Mesh* mesh = nullptr;
  // --tp: this rank's dropout stream of the split regions
  // (parallel::tp::TensorParallelLayers::split_generator), saved in checkpoints by its offset
  // (NOTE [Model-parallel training checkpoints]); null without --tp.
  Generator* split_dropout = nullptr;
};

// Trains: resumes when asked, evaluates before and after (printing the validation loss and
// perplexity), logs, checkpoints, plots. Returns the process exit code.
int train(const TrainOptions& o, TrainTask& task);

// The --dry-run lines: parameters, memory estimate.
void print_dry_run(const std::string& model_description, int64_t parameters, const models::MemoryEstimate& memory);

// Bytes per element of weights, gradients, optimizer state and activations for a precision, and
// whether the model trains on a GPU (--device).
models::MemoryOptions memory_options(const std::string& precision, const std::string& device);

// Reads the "extra" of a training checkpoint's trainer.json: {"model": ..., "config": ...};
// errors (missing or malformed checkpoint) name the path.
std::pair<std::string, std::string> checkpoint_model(const std::string& path);

// The newest complete checkpoint of --ckpt-dir when `resume` is "latest", else `resume`.
std::string resolve_resume(const std::string& resume, const std::string& ckpt_dir);

}  // namespace trident::apps
