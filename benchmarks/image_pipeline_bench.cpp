// The ImageNet training input pipeline against its floor: images per second of the loader
// (read + decode + RandomResizedCrop 224 + flip + normalize + collate, ImageFolderDataset on N
// worker threads) next to the raw stb_image decode rate of the same files on the same number of
// threads (read + stbi_load_from_memory, nothing else). The ratio says what the augmentation
// and the loader cost on top of decoding.
//
//   bench_image_pipeline [--images 256] [--seconds 3] [--batch 32]
#include <stb_image.h>
#include <unistd.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/image.h"
#include "data/image_datasets.h"
#include "data/loader.h"

using namespace trident;
using namespace trident::data;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// A 500 x 375 RGB picture with smooth shapes and some fine texture, so the JPEG is about the size
// of an ImageNet photo of that size rather than a flat gradient.
std::vector<uint8_t> photo_like(int h, int w, uint32_t seed) {
  std::vector<uint8_t> p(static_cast<size_t>(h) * w * 3);
  uint32_t r = seed * 2654435761u + 1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        r = r * 1664525u + 1013904223u;
        const double base = 128 + 60 * std::sin(0.021 * x * (c + 1) + 0.013 * y + seed) +
                            40 * std::cos(0.047 * y - 0.031 * x * (2 - c) + 0.7 * seed);
        const double noise = static_cast<double>(r >> 24) / 255.0 * 36.0 - 18.0;
        p[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(base + noise, 0.0, 255.0));
      }
  return p;
}

void append(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(ctx);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

// Raw decode on `threads` threads: each decodes files round-robin until the time is up.
double raw_decode_rate(const std::vector<std::string>& files, int threads, double seconds) {
  std::atomic<int64_t> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); !stop.load(); i = (i + static_cast<size_t>(threads)) % files.size()) {
        const std::vector<uint8_t> bytes = read_file(files[i]);
        int w, h, c;
        stbi_uc* px = stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &c, 3);
        if (!px) std::abort();
        stbi_image_free(px);
        done.fetch_add(1);
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& t : pool) t.join();
  return static_cast<double>(done.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double pipeline_rate(const std::shared_ptr<const Dataset>& ds, int workers, int64_t batch, double seconds) {
  LoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.seed = 1;
  Loader loader(ds, o, std::make_shared<ShuffledSampler>(ds->size(), 1));
  while (loader.next()) {
  }  // warm-up epoch (page cache, allocator)
  int64_t images = 0;
  const auto t0 = Clock::now();
  for (int64_t epoch = 1; std::chrono::duration<double>(Clock::now() - t0).count() < seconds; ++epoch) {
    loader.set_epoch(epoch);
    while (std::optional<Example> b = loader.next()) images += b->at(0).size(0);
  }
  return static_cast<double>(images) / std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int images = 256;  // 8 batches of 32 per epoch: the epoch boundary is a small part
  double seconds = 3.0;
  int64_t batch = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--images")) images = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(argv[i + 1]);
  }

  const fs::path root = fs::temp_directory_path() / ("trident_image_bench_" + std::to_string(::getpid()));
  std::vector<std::string> files;
  size_t bytes = 0;
  for (int i = 0; i < images; ++i) {
    const fs::path dir = root / "train" / ("n0" + std::to_string(i % 4));
    fs::create_directories(dir);
    std::vector<uint8_t> jpg;
    const std::vector<uint8_t> px = photo_like(375, 500, static_cast<uint32_t>(i));
    stbi_write_jpg_to_func(append, &jpg, 500, 375, 3, px.data(), 90);
    const std::string path = (dir / ("img" + std::to_string(i) + ".JPEG")).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(jpg.data()), static_cast<std::streamsize>(jpg.size()));
    files.push_back(path);
    bytes += jpg.size();
  }

  ImageFolderOptions fo;
  fo.transform = std::make_shared<TrainTransform>();  // 224, scale (0.08, 1), flip 0.5, ImageNet normalization, f32
  auto ds = std::make_shared<ImageFolderDataset>(root.string(), "train", fo);

  std::printf("%d generated 500x375 JPEGs (quality 90, %.0f KB on average), batch %lld, %.1f s per row, %u hardware threads\n\n",
              images, static_cast<double>(bytes) / images / 1024.0, static_cast<long long>(batch), seconds,
              std::thread::hardware_concurrency());
  std::printf("%-10s %22s %26s %8s\n", "threads", "stb decode (images/s)", "train pipeline (images/s)", "ratio");
  for (int threads : {1, 2}) {
    const double raw = raw_decode_rate(files, threads, seconds);
    const double pipe = pipeline_rate(ds, threads, batch, seconds);
    std::printf("%-10d %22.1f %26.1f %8.2f\n", threads, raw, pipe, pipe / raw);
  }
  std::printf("\npipeline: read + decode + RandomResizedCrop 224 + flip + normalize + collate on N loader workers;\n"
              "stb decode: read + stbi_load_from_memory on N threads. ratio = pipeline / decode.\n");
  fs::remove_all(root);
  return 0;
}
