// Trains AmoebaNet (models/amoebanet.h) on images: the ImageNet folder layout, CIFAR-10 or
// Fashion-MNIST (data/image_datasets.h), or a small synthetic set (for tests and smoke runs).
//
//   train_imagenet --dataset fashion-mnist --model tiny --epochs 1
//   train_imagenet --dataset imagenet --data /data/imagenet --model "amoebanet-d(18,256)" --dry-run
//
// Every step prints a progress line (step, loss, lr, images/s, ETA); metrics go to
// <out-dir>/metrics.jsonl as JSON lines; evaluation reports loss, top-1 and top-5; checkpoints
// (nn/training_checkpoint.h) resume exactly (NOTE [Exact resume]); at the end a PNG of the loss
// curves is drawn with gnuplot when it is installed. Bad input ends with one line on stderr
// naming what is wrong and exit status 2.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/device.h"
#include "data/image_datasets.h"
#include "data/loader.h"
#include "nn/checkpoint.h"
#include "nn/optim/schedule.h"
#include "nn/training_checkpoint.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Options {
  std::string dataset = "fashion-mnist", data, model = "tiny", device = "cpu", precision = "fp32";
  std::string optimizer = "sgd", schedule = "cosine", ckpt_dir, resume, config, out_dir = "runs/train_imagenet";
  int64_t batch = 64, grad_accum = 1, steps = 0, epochs = 0, warmup = 0, eval_every = 0, eval_batches = 0;
  int64_t stem_stride = 0, ckpt_every = 0, image_size = 0, classes = 0, workers = 2, log_every = 1, train_limit = 0;
  int64_t threads = 0;  // compute threads; 0: OpenMP's default (OMP_NUM_THREADS, or the cores)
  double lr = 0.05, weight_decay = 1e-4, momentum = 0.9, dropout = -1, label_smoothing = 0;
  uint64_t seed = 1234;
  bool dry_run = false, aux = false;
};

// ---- the synthetic dataset ----

// n images of `classes` classes: class k is a fixed random pattern plus noise, so a small
// network learns it in a few steps. Deterministic in (seed, index).
class SyntheticImages final : public data::Dataset {
 public:
  SyntheticImages(int64_t n, int64_t classes, int64_t channels, int64_t size, uint64_t seed)
      : n_(n), classes_(classes), shape_{channels, size, size} {
    Generator g(seed);
    for (int64_t k = 0; k < classes; ++k) patterns_.push_back(randn(shape_, kF32, &g));
  }
  int64_t size() const override { return n_; }
  data::Example get(int64_t index, Generator&) const override {
    Generator g(data::example_seed(0x5eed, 0, index));
    const int64_t label = index % classes_;
    Tensor x = add(patterns_[static_cast<size_t>(label)], mul(randn(shape_, kF32, &g), 0.5));
    return {x, scalar_tensor(static_cast<double>(label), kI64)};
  }

 private:
  int64_t n_, classes_;
  Shape shape_;
  std::vector<Tensor> patterns_;
};

// ---- datasets by name ----

struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  int64_t classes = 0, channels = 3, image_size = 0;
};

// Where a dataset's default image size and classes come from before any file is opened, so a
// --dry-run needs no data.
void dataset_defaults(const Options& o, int64_t& classes, int64_t& channels, int64_t& size) {
  if (o.dataset == "imagenet") {
    classes = 1000, channels = 3, size = 224;
  } else if (o.dataset == "cifar10") {
    classes = 10, channels = 3, size = 32;
  } else if (o.dataset == "fashion-mnist") {
    classes = 10, channels = 1, size = 28;
  } else if (o.dataset == "synthetic") {
    classes = 4, channels = 3, size = 16;
  } else {
    TRIDENT_FAIL("unknown dataset '", o.dataset, "' (known: imagenet, cifar10, fashion-mnist, synthetic)");
  }
  if (o.classes > 0) classes = o.classes;
  if (o.image_size > 0) size = o.image_size;
}

std::string default_data_path(const std::string& dataset) {
  if (dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist
  return "";
}

Data open_data(const Options& o) {
  Data d;
  dataset_defaults(o, d.classes, d.channels, d.image_size);
  const std::string path = o.data.empty() ? default_data_path(o.dataset) : o.data;
  if (o.dataset != "synthetic") {
    TRIDENT_CHECK(!path.empty(), "--dataset ", o.dataset, " needs --data PATH");
    TRIDENT_CHECK(fs::is_directory(path), "data path '", path, "' is not a folder");
  }
  if (o.dataset == "imagenet") {
    data::TrainTransformOptions tt;
    tt.size = d.image_size;
    data::EvalTransformOptions et;
    et.size = d.image_size;
    data::ImageFolderOptions train_opt, test_opt;
    train_opt.transform = std::make_shared<data::TrainTransform>(tt);
    test_opt.transform = std::make_shared<data::EvalTransform>(et);
    auto train = std::make_shared<data::ImageFolderDataset>(path, "train", train_opt);
    d.test = std::make_shared<data::ImageFolderDataset>(path, "val", test_opt);
    const auto n = static_cast<int64_t>(train->classes().size());
    TRIDENT_CHECK(o.classes == 0 || o.classes == n, "--classes ", o.classes, " but ", path, "/train has ", n, " classes");
    d.classes = n;
    d.train = train;
  } else if (o.dataset == "cifar10") {
    d.train = std::make_shared<data::CifarDataset>(
        data::CifarDataset::standard_files(path, data::CifarVariant::Cifar10, true));
    d.test = std::make_shared<data::CifarDataset>(
        data::CifarDataset::standard_files(path, data::CifarVariant::Cifar10, false));
    TRIDENT_CHECK(d.image_size == 32, "CIFAR-10 images are 32x32; --image-size ", d.image_size, " is not supported");
  } else if (o.dataset == "fashion-mnist") {
    data::IdxOptions io;
    io.mean = 0.2860f;  // Fashion-MNIST's pixel mean and standard deviation
    io.std = 0.3530f;
    auto file = [&](const char* name) {
      for (const std::string ext : {".gz", ""})
        if (fs::exists(fs::path(path) / (std::string(name) + ext))) return (fs::path(path) / (std::string(name) + ext)).string();
      TRIDENT_FAIL("no ", name, "[.gz] in ", path, " (install the Debian package dataset-fashion-mnist)");
    };
    d.train = std::make_shared<data::IdxDataset>(file("train-images-idx3-ubyte"), file("train-labels-idx1-ubyte"), io);
    d.test = std::make_shared<data::IdxDataset>(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"), io);
    TRIDENT_CHECK(d.image_size == 28, "Fashion-MNIST images are 28x28; --image-size ", d.image_size, " is not supported");
  } else {
    d.train = std::make_shared<SyntheticImages>(256, d.classes, d.channels, d.image_size, o.seed);
    d.test = std::make_shared<SyntheticImages>(64, d.classes, d.channels, d.image_size, o.seed);
  }
  return d;
}

// A dataset's first n examples (--train-limit).
class Prefix final : public data::Dataset {
 public:
  Prefix(std::shared_ptr<const data::Dataset> base, int64_t n) : base_(std::move(base)), n_(std::min(n, base_->size())) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t i, Generator& g) const override { return base_->get(i, g); }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int64_t n_;
};

// ---- the model ----

// Presets for the CPU; anything else is a name like "amoebanet-d(18,256)".
AmoebaNetConfig model_config(const Options& o, int64_t classes, int64_t channels, int64_t size) {
  AmoebaNetConfig c;
  if (o.model == "tiny") {
    c = AmoebaNetConfig::from_name("amoebanet-d(3,16)", classes, size, channels);
    c.stem_filters = 16;
  } else if (o.model == "small") {
    c = AmoebaNetConfig::from_name("amoebanet-d(6,32)", classes, size, channels);
  } else if (o.model.rfind("amoebanet", 0) == 0 || o.model.rfind("AmoebaNet", 0) == 0) {
    c = AmoebaNetConfig::from_name(o.model, classes, size, channels);
  } else {
    TRIDENT_FAIL("unknown model preset '", o.model, "' (known: tiny, small, or amoebanet-d(L,D) / amoebanet-b(L,D))");
  }
  c.aux_head = o.aux;
  c.stem_stride = o.stem_stride;
  if (o.dropout >= 0) c.dropout = o.dropout;
  c.validate();
  return c;
}

// What a checkpoint records of the network, to refuse resuming another one.
std::string model_id(const AmoebaNetConfig& c) {
  return detail::str(c.name(), " for ", c.num_classes, " classes of ", c.in_channels, "x", c.image_size, "x", c.image_size,
                     c.aux_head ? ", auxiliary head" : "");
}

// ---- configuration file ----

// --config FILE.json: an object whose keys are option names without the dashes ("batch": 64,
// "dry-run": true). Its values are put before the command line's, and every option takes its
// last value, so flags override the file.
std::vector<std::string> config_args(const std::string& path, const CLI::App& app) {
  std::ifstream in(path);
  TRIDENT_CHECK(in.good(), "cannot read config file '", path, "'");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    TRIDENT_FAIL("config file '", path, "' is not valid JSON: ", e.what());
  }
  TRIDENT_CHECK(j.is_object(), "config file '", path, "' must hold a JSON object of option names to values");
  std::vector<std::string> args;
  for (const auto& [key, value] : j.items()) {
    const CLI::Option* opt = app.get_option_no_throw("--" + key);
    TRIDENT_CHECK(opt != nullptr && key != "config", "config file '", path, "': unknown option '", key, "'");
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back("--" + key);
    } else {
      TRIDENT_CHECK(value.is_string() || value.is_number(), "config file '", path, "': option '", key,
                    "' must be a string, number or boolean, got ", value.dump());
      args.push_back("--" + key);
      args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  return args;
}

// ---- evaluation ----

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  int64_t images = 0;
};

EvalResult evaluate(AmoebaNet& model, const std::shared_ptr<const data::Dataset>& test, const Options& o, DType autocast_dtype,
                    Device dev) {
  NoGradGuard no_grad;
  model.eval();
  data::Loader loader(test, {.batch_size = o.batch, .num_workers = static_cast<int>(o.workers), .seed = o.seed});
  EvalResult r;
  double loss_sum = 0;
  int64_t c1 = 0, c5 = 0, batches = 0;
  while (std::optional<data::Example> b = loader.next()) {
    if (o.eval_batches > 0 && batches++ >= o.eval_batches) break;
    Tensor logits;
    {
      autocast::Guard guard(autocast_dtype, autocast_dtype != kF32);
      logits = model.forward((*b)[0].to(dev));
    }
    logits = logits.to(kF32);
    const Tensor& y = (*b)[1];  // the host labels (read below)
    CrossEntropyOptions ce;
    ce.reduction = Reduction::Sum;
    loss_sum += cross_entropy(logits, y.to(dev), ce).item<double>();
    const int64_t n = logits.size(0), k = logits.size(1);
    const std::vector<float> v = logits.contiguous().to_vector<float>();
    const std::vector<int64_t> labels = y.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float* row = v.data() + i * k;
      const float target = row[labels[static_cast<size_t>(i)]];
      int64_t above = 0;  // classes scored strictly higher than the label (ties count for it)
      for (int64_t j = 0; j < k; ++j) above += row[j] > target;
      c1 += above < 1;
      c5 += above < 5;
    }
    r.images += n;
  }
  model.train();
  TRIDENT_CHECK(r.images > 0, "the evaluation set is empty");
  const auto n = static_cast<double>(r.images);
  r.loss = loss_sum / n;
  r.top1 = static_cast<double>(c1) / n;
  r.top5 = static_cast<double>(c5) / n;
  return r;
}

// ---- output ----

std::string duration_str(double s) {
  char buf[32];
  const auto t = static_cast<int64_t>(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t % 3600 / 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// Draws train loss (and eval loss) against the step from the metrics file; returns the PNG's
// path, or "" when gnuplot is missing or fails.
std::string plot_losses(const fs::path& metrics, const fs::path& out_dir) {
  if (!have_gnuplot()) return "";
  std::ifstream in(metrics);
  std::ofstream train(out_dir / "train_loss.dat"), eval(out_dir / "eval_loss.dat");
  std::string line;
  bool any_eval = false;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("loss")) train << j["step"].get<int64_t>() << " " << j["loss"].get<double>() << "\n";
    if (j.contains("eval_loss")) {
      eval << j["step"].get<int64_t>() << " " << j["eval_loss"].get<double>() << "\n";
      any_eval = true;
    }
  }
  train.close();
  eval.close();
  const fs::path png = out_dir / "loss.png";
  std::ofstream gp(out_dir / "loss.gp");
  gp << "set terminal png size 900,540\nset output '" << png.string() << "'\nset xlabel 'step'\nset ylabel 'loss'\n"
     << "set title 'AmoebaNet training'\nset grid\nplot '" << (out_dir / "train_loss.dat").string()
     << "' using 1:2 with lines title 'train'";
  if (any_eval) gp << ", '" << (out_dir / "eval_loss.dat").string() << "' using 1:2 with linespoints title 'eval'";
  gp << "\n";
  gp.close();
  const std::string cmd = "gnuplot '" + (out_dir / "loss.gp").string() + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0 && fs::exists(png) ? png.string() : "";
}

int run(const Options& o) {
  // NOTE [Device in the apps] (apps/device.h); AmoebaNet's convolutions, pooling and batch norm
  // need their CUDA kernels (cuDNN) to run there.
  const Device dev = apps::resolve_device(o.device);
  DType amp = kF32;
  if (o.precision == "bf16") amp = kBF16;
  else if (o.precision == "fp16") amp = kF16;
  else TRIDENT_CHECK(o.precision == "fp32", "unknown precision '", o.precision, "' (fp32, bf16 or fp16)");
  TRIDENT_CHECK(o.optimizer == "sgd" || o.optimizer == "adamw", "unknown optimizer '", o.optimizer, "' (sgd or adamw)");
  TRIDENT_CHECK(o.schedule == "cosine" || o.schedule == "constant" || o.schedule == "linear", "unknown schedule '",
                o.schedule, "' (cosine, linear or constant)");
  TRIDENT_CHECK(o.ckpt_every == 0 || !o.ckpt_dir.empty(), "--ckpt-every needs --ckpt-dir");

  int64_t classes = 0, channels = 0, size = 0;
  dataset_defaults(o, classes, channels, size);
  if (o.dry_run) {
    const AmoebaNetConfig c = model_config(o, classes, channels, size);
    const AmoebaNetPlan plan = amoebanet_plan(c);
    std::printf("%s on %lldx%lldx%lld images, %lld classes (%s stem)\n", c.name().c_str(), static_cast<long long>(channels),
                static_cast<long long>(size), static_cast<long long>(size), static_cast<long long>(classes),
                c.stem == AmoebaNetConfig::Stem::ImageNet ? "ImageNet" : "small");
    std::printf("%-18s %-14s %-18s %14s\n", "layer", "type", "output", "parameters");
    for (const AmoebaLayerInfo& l : plan.layers)
      std::printf("%-18s %-14s [%lld, %lld, %lld]%*s %14lld\n", l.name.c_str(), l.type.c_str(), static_cast<long long>(l.out.c),
                  static_cast<long long>(l.out.h), static_cast<long long>(l.out.w), 4, "", static_cast<long long>(l.parameters));
    std::printf("parameters: %lld (%.1fM)\n", static_cast<long long>(plan.parameters), static_cast<double>(plan.parameters) / 1e6);
    const AmoebaNetMemory mem = amoebanet_memory(c, o.optimizer == "sgd" ? 1 : 2, amp);
    std::printf("training memory estimate (%s, %s):\n%s\n", o.optimizer.c_str(), o.precision.c_str(), mem.str(o.batch).c_str());
    return 0;
  }

  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  Data d = open_data(o);
  if (o.train_limit > 0) d.train = std::make_shared<Prefix>(d.train, o.train_limit);
  const AmoebaNetConfig c = model_config(o, d.classes, d.channels, d.image_size);

  manual_seed(o.seed);  // dropout draws from the default generator
  Generator init_gen(o.seed);
  AmoebaNet model(c, &init_gen);
  if (!dev.is_cpu()) {
    model.to(dev);  // before the optimizer: its state is made on the parameters' device
    std::printf("device: %s\n", apps::describe_device(dev).c_str());
  }
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (o.optimizer == "sgd")
    opt = std::make_unique<nn::optim::SGD>(
        model.parameters(), nn::optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay,
                                                  .nesterov = o.momentum > 0});
  else
    opt = std::make_unique<nn::optim::AdamW>(model.parameters(),
                                             nn::optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  nn::GradScaler scaler({.enabled = amp == kF16});

  data::Loader loader(d.train, {.batch_size = o.batch, .drop_last = true, .num_workers = static_cast<int>(o.workers),
                                .seed = o.seed},
                      std::make_shared<data::ShuffledSampler>(d.train->size(), o.seed));
  const int64_t per_epoch = loader.batches_per_epoch() / o.grad_accum;
  TRIDENT_CHECK(per_epoch > 0, "the training set (", d.train->size(), " images) is smaller than one step of ",
                o.batch * o.grad_accum, " images (--batch x --grad-accum)");
  const int64_t total = o.steps > 0 ? o.steps : (o.epochs > 0 ? o.epochs : 1) * per_epoch;
  std::shared_ptr<const nn::optim::LRSchedule> schedule;
  if (o.schedule == "cosine") schedule = std::make_shared<nn::optim::WarmupCosineLR>(o.warmup, std::max(total, o.warmup + 1));
  else if (o.schedule == "linear") schedule = std::make_shared<nn::optim::LinearLR>(o.warmup, std::max(total, o.warmup + 1));
  else schedule = std::make_shared<nn::optim::ConstantLR>(o.warmup);

  nn::TrainingCheckpointParts parts{&model, opt.get(), &scaler, {}, nullptr, {}};
  int64_t step = 0;
  if (!o.resume.empty()) {
    std::string path = o.resume;
    if (path == "latest") {
      TRIDENT_CHECK(!o.ckpt_dir.empty(), "--resume latest needs --ckpt-dir");
      const auto latest = nn::latest_checkpoint(o.ckpt_dir);
      TRIDENT_CHECK(latest.has_value(), "--resume latest: no complete checkpoint in ", o.ckpt_dir);
      path = *latest;
    }
    TRIDENT_CHECK(fs::is_directory(path), "--resume: checkpoint '", path, "' is not a folder");
    // Which network the checkpoint holds, before loading it: a clearer message than a list of
    // mismatched tensors. (A missing or malformed trainer.json is load_training_checkpoint's to report.)
    std::ifstream trainer(fs::path(path) / "trainer.json");
    const json t = trainer ? json::parse(trainer, nullptr, false) : json();
    if (t.is_object() && t.contains("extra") && t["extra"].is_object()) {
      const std::string saved = t["extra"].value("model", std::string("another model"));
      TRIDENT_CHECK(saved == model_id(c), "--resume: checkpoint '", path, "' holds ", saved, ", not ", model_id(c));
    }
    const nn::TrainingProgress p = nn::load_training_checkpoint(path, parts);
    step = p.step;
    loader.restore(p.data_position.get<data::LoaderPosition>());
    std::printf("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(step));
  }
  nn::optim::LRScheduler scheduler(*opt, schedule, step);

  const fs::path out_dir = o.out_dir;
  fs::create_directories(out_dir);
  if (!o.ckpt_dir.empty()) fs::create_directories(o.ckpt_dir);
  const fs::path metrics_path = out_dir / "metrics.jsonl";
  std::ofstream metrics(metrics_path, step > 0 ? std::ios::app : std::ios::trunc);
  std::printf("%s: %lld parameters, %lld training images (%lld steps of %lld), %s, %s\n", c.name().c_str(),
              static_cast<long long>(model.num_parameters()), static_cast<long long>(d.train->size()),
              static_cast<long long>(total), static_cast<long long>(o.batch * o.grad_accum), o.optimizer.c_str(),
              o.precision.c_str());
  std::fflush(stdout);

  const bool tty = ::isatty(1) != 0;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int64_t first_step = step;
  double last_loss = NAN;
  std::optional<EvalResult> last_eval;
  auto next_batch = [&]() {
    std::optional<data::Example> b = loader.next();
    if (!b) {
      loader.set_epoch(loader.position().epoch + 1);
      b = loader.next();
    }
    return *b;
  };
  while (step < total) {
    const auto t0 = Clock::now();
    opt->zero_grad();
    std::vector<Tensor> micro_losses;  // read together below: one copy to the host per step
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      const data::Example b = next_batch();
      Tensor loss;
      {
        autocast::Guard guard(amp, amp != kF32);
        loss = amoebanet_loss(model.forward_state(b[0].to(dev)), b[1].to(dev), 0.4, o.label_smoothing);
      }
      loss = div(loss, static_cast<double>(o.grad_accum));
      scaler.scale(loss).backward();
      micro_losses.push_back(loss.detach());
    }
    double loss_sum = 0;
    for (double v : stack(micro_losses).to_vector<double>()) loss_sum += v;
    scaler.step(*opt);
    scaler.update();
    const double lr = opt->lr(0);
    scheduler.step();
    ++step;
    last_loss = loss_sum;
    TRIDENT_CHECK(std::isfinite(last_loss) || amp == kF16, "the loss is ", last_loss, " at step ", step,
                  "; lower --lr or use --precision fp32");
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double ips = static_cast<double>(o.batch * o.grad_accum) / dt;
    const double eta = elapsed / static_cast<double>(step - first_step) * static_cast<double>(total - step);
    metrics << json{{"step", step}, {"loss", last_loss}, {"lr", lr}, {"images_per_s", ips}, {"epoch", loader.position().epoch}}.dump()
            << "\n";
    metrics.flush();
    if (step % o.log_every == 0 || step == total) {
      // %.9g: enough digits to tell two f32 losses apart (the resume test compares them).
      std::printf("%sstep %6lld/%lld  loss %.9g  lr %.3g  %.1f images/s  ETA %s%s", tty ? "\r" : "", static_cast<long long>(step),
                  static_cast<long long>(total), last_loss, lr, ips, duration_str(eta).c_str(), tty ? "   " : "\n");
      std::fflush(stdout);
    }
    const bool last = step == total;
    if ((o.eval_every > 0 && step % o.eval_every == 0) || (last && o.eval_every >= 0)) {
      const EvalResult r = evaluate(model, d.test, o, amp, dev);
      last_eval = r;
      std::printf("%seval at step %lld: loss %.4f  top-1 %.2f%%  top-5 %.2f%%  (%lld images)\n", tty ? "\n" : "",
                  static_cast<long long>(step), r.loss, 100 * r.top1, 100 * r.top5, static_cast<long long>(r.images));
      std::fflush(stdout);
      metrics << json{{"step", step}, {"eval_loss", r.loss}, {"top1", r.top1}, {"top5", r.top5}, {"eval_images", r.images}}.dump()
              << "\n";
      metrics.flush();
    }
    if (o.ckpt_every > 0 && (step % o.ckpt_every == 0 || last)) {
      const std::string path = (fs::path(o.ckpt_dir) / ("step-" + std::to_string(step))).string();
      nn::save_training_checkpoint(path, parts, {step, json(loader.position()), json{{"model", model_id(c)}}});
    }
  }
  if (tty) std::printf("\n");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("trained %lld steps in %s; metrics: %s\n", static_cast<long long>(step - first_step),
              duration_str(seconds).c_str(), metrics_path.string().c_str());
  metrics.close();
  const std::string png = plot_losses(metrics_path, out_dir);
  if (!png.empty()) std::printf("loss plot: %s\n", png.c_str());
  else std::printf("loss plot: skipped (gnuplot is not installed)\n");
  // The result last, where a user (and scripts/demo.sh images) looks for it.
  if (last_eval)
    std::printf("test top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, after step %lld)\n", 100 * last_eval->top1,
                100 * last_eval->top5, last_eval->loss, static_cast<long long>(last_eval->images), static_cast<long long>(step));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train AmoebaNet on ImageNet (folder layout), CIFAR-10, Fashion-MNIST or synthetic images"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Options o;
  app.add_option("--dataset", o.dataset, "imagenet | cifar10 | fashion-mnist | synthetic")->capture_default_str();
  app.add_option("--data", o.data,
                 "dataset folder: ImageNet root (train/, val/), cifar-10-batches-bin, or the Fashion-MNIST IDX files "
                 "(default /usr/share/datasets/fashion-mnist)");
  app.add_option("--model", o.model, "tiny | small | amoebanet-d(L,D) | amoebanet-b(L,D)")->capture_default_str();
  app.add_option("--image-size", o.image_size, "input size (default: the dataset's; 224 for ImageNet)");
  app.add_option("--classes", o.classes, "number of classes (default: the dataset's)");
  app.add_option("--stem-stride", o.stem_stride, "stride of the stem convolution (default: 2 for ImageNet, 1 otherwise)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--aux", o.aux, "add the auxiliary head (loss weight 0.4)");
  app.add_option("--dropout", o.dropout, "classifier dropout (default 0.5)");
  app.add_option("--device", o.device, "cpu | cuda")->capture_default_str();
  app.add_option("--precision", o.precision, "fp32 | bf16 | fp16 (autocast; fp16 with loss scaling)")->capture_default_str();
  app.add_option("--batch", o.batch, "images per micro-batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd (Nesterov momentum) | adamw")->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--schedule", o.schedule, "cosine | linear | constant")->capture_default_str();
  app.add_option("--warmup", o.warmup, "warm-up steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing")->check(CLI::Range(0.0, 1.0));
  app.add_option("--steps", o.steps, "optimizer steps (overrides --epochs)")->check(CLI::NonNegativeNumber);
  app.add_option("--epochs", o.epochs, "epochs (default 1 when --steps is not given)")->check(CLI::NonNegativeNumber);
  app.add_option("--train-limit", o.train_limit, "use only the first N training images")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-every", o.eval_every, "evaluate every N steps (0: at the end only; -1: never)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  app.add_option("--eval-batches", o.eval_batches, "evaluate on at most N batches (0: the whole test set)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-dir", o.ckpt_dir, "folder for checkpoints (step-N subfolders)");
  app.add_option("--ckpt-every", o.ckpt_every, "checkpoint every N steps and at the end (needs --ckpt-dir)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resume", o.resume, "a checkpoint folder to continue from, or 'latest' (newest in --ckpt-dir)");
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0: OMP_NUM_THREADS, or all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--workers", o.workers, "data loader threads")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--log-every", o.log_every, "print the progress line every N steps")->check(CLI::PositiveNumber);
  app.add_option("--out-dir", o.out_dir, "folder for metrics.jsonl and loss.png")->capture_default_str();
  app.add_flag("--dry-run", o.dry_run, "print the layers, parameter count and memory estimate, and exit");
  app.add_option("--config", o.config, "a JSON file of options (\"batch\": 64, ...); flags override it");

  // --config first: its values go before the command line's (the last value of an option wins).
  std::vector<std::string> args;
  try {
    std::string config;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--config" && i + 1 < argc) config = argv[i + 1];
      else if (a.rfind("--config=", 0) == 0) config = a.substr(9);
    }
    if (!config.empty()) args = config_args(config, app);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_imagenet: %s\n", e.message().c_str());
    return 2;
  }
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(o);
  } catch (const Error& e) {
    // One line: a progress line on a terminal may be open, so end it first; of a multi-line
    // message (a state dict's list of mismatches) the first line says what is wrong.
    std::string m = e.message();
    if (const size_t nl = m.find('\n'); nl != std::string::npos) m = m.substr(0, nl) + " (...)";
    std::fprintf(stderr, "%strain_imagenet: %s\n", ::isatty(1) ? "\n" : "", m.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%strain_imagenet: %s\n", ::isatty(1) ? "\n" : "", e.what());
    return 2;
  }
}
