// Trains AmoebaNet (models/amoebanet.h) on images: the ImageNet folder layout, CIFAR-10 or
// Fashion-MNIST (data/image_datasets.h), or a small synthetic set (for tests and smoke runs).
//
//   train_imagenet --dataset fashion-mnist --model tiny --epochs 1
//   train_imagenet --dataset imagenet --data /data/imagenet --model "amoebanet-d(18,256)" --dry-run
//   mpirun -np 4 train_imagenet --dataset cifar10 --data D --model "amoebanet-d(6,64)" --pp 4 --micro-batches 8
//
// The loop, options, checkpoints, metrics and the parallel layouts (--dp, --pp, --zero) are
// apps/train_common.h's (NOTE [Training apps], NOTE [Parallel training apps]); the network runs
// as models::AmoebaNetLayered, its batch norms as NOTE [Batch norm in the apps] says. Evaluation
// reports the test set's loss, top-1 and top-5 (val_loss, val_top1, val_top5), and the last line
// the final top-1 and top-5. Bad input ends with one line on stderr naming what is wrong and exit
// status 2.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/train_common.h"
#include "data/image_datasets.h"
#include "models/amoebanet_layered.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The options of the images and the network (the training options are apps::TrainOptions).
struct ImageOptions {
  std::string dataset = "fashion-mnist", data, model = "tiny";
  int64_t stem_stride = 0, image_size = 0, classes = 0, train_limit = 0;
  double dropout = -1, label_smoothing = 0;
  bool aux = false;
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
void dataset_defaults(const ImageOptions& o, int64_t& classes, int64_t& channels, int64_t& size) {
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

Data open_data(const ImageOptions& o, uint64_t seed) {
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
    d.train = std::make_shared<SyntheticImages>(256, d.classes, d.channels, d.image_size, seed);
    d.test = std::make_shared<SyntheticImages>(64, d.classes, d.channels, d.image_size, seed);
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
AmoebaNetConfig model_config(const ImageOptions& o, int64_t classes, int64_t channels, int64_t size) {
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

// Of a batch's logits [N, K] and labels [N]: the summed cross-entropy and the numbers of labels
// ranked first and within the first five (a tie counts for the label).
std::map<std::string, std::pair<double, double>> image_metrics(const Activations& out, const Batch& b) {
  const Tensor logits = out.at(0).to(kF32).to(kCPU).contiguous();
  const Tensor labels = b.at("labels").to(kCPU);
  CrossEntropyOptions ce;
  ce.reduction = Reduction::Sum;
  const double loss = cross_entropy(logits, labels, ce).item<double>();
  const int64_t n = logits.size(0), k = logits.size(1);
  const std::vector<float> v = logits.to_vector<float>();
  const std::vector<int64_t> y = labels.to_vector<int64_t>();
  double top1 = 0, top5 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = v.data() + i * k;
    const float target = row[y[static_cast<size_t>(i)]];
    int64_t above = 0;  // classes scored strictly higher than the label
    for (int64_t j = 0; j < k; ++j) above += row[j] > target;
    top1 += above < 1;
    top5 += above < 5;
  }
  const auto rows = static_cast<double>(n);
  return {{"val_loss", {loss, rows}}, {"val_top1", {top1, rows}}, {"val_top5", {top5, rows}}};
}

void print_dry_run(const AmoebaNetConfig& c, const apps::TrainOptions& o) {
  const AmoebaNetPlan plan = amoebanet_plan(c);
  std::printf("%s on %lldx%lldx%lld images, %lld classes (%s stem)\n", c.name().c_str(), static_cast<long long>(c.in_channels),
              static_cast<long long>(c.image_size), static_cast<long long>(c.image_size), static_cast<long long>(c.num_classes),
              c.stem == AmoebaNetConfig::Stem::ImageNet ? "ImageNet" : "small");
  std::printf("%-18s %-14s %-18s %14s\n", "layer", "type", "output", "parameters");
  for (const AmoebaLayerInfo& l : plan.layers)
    std::printf("%-18s %-14s [%lld, %lld, %lld]%*s %14lld\n", l.name.c_str(), l.type.c_str(), static_cast<long long>(l.out.c),
                static_cast<long long>(l.out.h), static_cast<long long>(l.out.w), 4, "", static_cast<long long>(l.parameters));
  std::printf("parameters: %lld (%.1fM)\n", static_cast<long long>(plan.parameters), static_cast<double>(plan.parameters) / 1e6);
  // NOTE [AmoebaNet multiply-adds]
  std::printf("multiply-adds per image (forward, convolutions and linear layers): %lld (%.2f G); training: %.2f GFLOP per image\n",
              static_cast<long long>(plan.multiply_adds), static_cast<double>(plan.multiply_adds) / 1e9,
              6 * static_cast<double>(plan.multiply_adds) / 1e9);
  const DType act = o.precision == "fp32" ? kF32 : apps::autocast_dtype(o.precision);
  // Optimizer slots: SGD's momentum; AdamW's two moments; RMSProp's square average and momentum.
  const AmoebaNetMemory mem =
      amoebanet_memory(c, o.optimizer == "sgd" || (o.optimizer == "rmsprop" && o.momentum == 0) ? 1 : 2, act, o.device == "cpu");
  std::printf("training memory estimate (%s, %s):\n%s\n", o.optimizer.c_str(), o.precision.c_str(), mem.str(o.batch).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train AmoebaNet on ImageNet (folder layout), CIFAR-10, Fashion-MNIST or synthetic images", "train_imagenet"};
  ImageOptions im;
  apps::TrainOptions o;
  // The image models' defaults: SGD with Nesterov momentum, no clipping, a cosine to zero, the
  // whole test set evaluated.
  o.optimizer = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  o.beta2 = 0.999;
  o.weight_decay = 1e-4;
  o.grad_clip = 0;
  o.min_lr_fraction = 0;
  o.batch = 64;
  o.workers = 2;
  o.eval_batches = 0;
  app.add_option("--dataset", im.dataset, "imagenet | cifar10 | fashion-mnist | synthetic")->capture_default_str();
  app.add_option("--data", im.data,
                 "dataset folder: ImageNet root (train/, val/), cifar-10-batches-bin, or the Fashion-MNIST IDX files "
                 "(default /usr/share/datasets/fashion-mnist)");
  app.add_option("--model", im.model, "tiny | small | amoebanet-d(L,D) | amoebanet-b(L,D)")->capture_default_str();
  app.add_option("--image-size", im.image_size, "input size (default: the dataset's; 224 for ImageNet)");
  app.add_option("--classes", im.classes, "number of classes (default: the dataset's)");
  app.add_option("--stem-stride", im.stem_stride, "stride of the stem convolution (default: 2 for ImageNet, 1 otherwise)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--aux", im.aux, "add the auxiliary head (loss weight 0.4)");
  app.add_option("--dropout", im.dropout, "classifier dropout (default 0.5)");
  app.add_option("--label-smoothing", im.label_smoothing, "label smoothing")->check(CLI::Range(0.0, 1.0));
  app.add_option("--train-limit", im.train_limit, "use only the first N training images")->check(CLI::NonNegativeNumber);
  apps::add_train_options(app, o);
  if (int rc = apps::parse(app, argc, argv); rc >= 0) return rc;

  try {
    apps::check_train_options(o);
    TRIDENT_CHECK(o.tp == 1, "--tp ", o.tp, ": AmoebaNet has no tensor-parallel layers; use --dp and --pp");
    int64_t classes = 0, channels = 0, size = 0;
    dataset_defaults(im, classes, channels, size);
    if (o.dry_run) {
      print_dry_run(model_config(im, classes, channels, size), o);
      return 0;
    }
    Data d = open_data(im, o.seed);
    if (im.train_limit > 0) d.train = std::make_shared<Prefix>(d.train, im.train_limit);
    const AmoebaNetConfig c = model_config(im, d.classes, d.channels, d.image_size);
    const AmoebaNetPlan plan = amoebanet_plan(c);  // per-layer counts, without building (NOTE [AmoebaNet dry build])

    const parallel::Mesh mesh = apps::make_mesh(o);  // NOTE [Parallel training apps]
    manual_seed(o.seed);  // dropout draws from the default generator
    Generator init(o.seed);
    // Under --pp each rank builds its stage only (NOTE [AmoebaNet stage-only build]): the cut
    // by the plan's per-layer parameter counts (the cut the Pipeline would make of the built
    // network) or multiply-adds (NOTE [Pipeline balance in the apps]), given to the Pipeline.
    const apps::StageCut cut = apps::cut_for_stage(o, mesh, [&] {
      std::vector<double> costs;
      for (const AmoebaLayerInfo& l : plan.layers)
        costs.push_back(static_cast<double>(o.pp_balance == "compute" ? l.multiply_adds : l.parameters));
      return costs;
    });
    AmoebaNetLayered model(apps::build_model(o, [&] { return std::make_shared<AmoebaNet>(c, &init, cut.keep); }),
                           c.aux_scaling, im.label_smoothing);
    apps::say("%s: %lld parameters, %lld training images, %lld test images\n", model_id(c).c_str(),
              static_cast<long long>(model.num_parameters()), static_cast<long long>(d.train->size()),
              static_cast<long long>(d.test->size()));

    apps::TrainTask task;
    task.app = "train_imagenet";
    task.model_name = "amoebanet";
    task.config_json = json{{"network", model_id(c)}, {"dropout", c.dropout}, {"label_smoothing", im.label_smoothing}}.dump();
    task.model = &model;
    task.mesh = &mesh;
    task.pp_balance = cut.balance;
    task.train = d.train;
    task.val = d.test;
    task.to_batch = [](const data::Example& ex) { return Batch{{"images", ex.at(0)}, {"labels", ex.at(1)}}; };
    task.tokens = [](const Batch& b) { return b.at("labels").size(0); };
    // NOTE [MFU] (GPU runs): 6 FLOPs per multiply-add per image (NOTE [AmoebaNet multiply-adds]).
    if (o.device != "cpu")
      task.flops = [macs = static_cast<double>(plan.multiply_adds)](const Batch& b, const std::vector<double>&) {
        return 6 * macs * static_cast<double>(b.at("labels").size(0));
      };
    task.rate_unit = "img/s";
    task.rate_key = "images_per_s";
    task.eval = image_metrics;
    // The evaluated images: the whole test set, or --eval-batches batches of --batch x --dp.
    int64_t evaluated = d.test->size();
    if (o.eval_batches > 0) evaluated = std::min(evaluated, o.eval_batches * o.batch * o.dp);
    task.summary = [evaluated](const std::map<std::string, double>& m, int64_t step) {
      if (m.count("val_top1") == 0) return;
      std::printf("test top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, after step %lld)\n", 100 * m.at("val_top1"),
                  100 * m.at("val_top5"), m.at("val_loss"), static_cast<long long>(evaluated), static_cast<long long>(step));
    };
    return apps::train(o, task);
  } catch (const Error& e) {
    // One line: of a multi-line message (a state dict's list of mismatches) the first line says
    // what is wrong.
    std::string m = e.message();
    if (const size_t nl = m.find('\n'); nl != std::string::npos) m = m.substr(0, nl) + " (...)";
    std::fprintf(stderr, "train_imagenet: %s\n", m.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_imagenet: %s\n", e.what());
    return 2;
  }
}
