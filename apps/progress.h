// A progress bar on stderr for the data-preparation apps: bytes done of the total, MB/s, and the
// time left. On a terminal it redraws one line at most every 0.2 s; otherwise (a log file) it
// prints a line at every tenth of the way.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trident::apps {

class Progress {
 public:
  Progress(std::string what, uint64_t total_bytes, bool quiet = false)
      : what_(std::move(what)), total_(total_bytes), quiet_(quiet), tty_(::isatty(2) != 0), start_(Clock::now()) {}

  void update(uint64_t done_bytes) {
    done_ = done_bytes;
    if (quiet_) return;
    const auto now = Clock::now();
    if (tty_) {
      if (now - last_ < std::chrono::milliseconds(200) && done_ < total_) return;
      last_ = now;
      draw('\r');
    } else {
      const int tenth = total_ ? static_cast<int>(10 * done_ / total_) : 10;
      if (tenth <= last_tenth_) return;
      last_tenth_ = tenth;
      draw('\n');
    }
  }
  void finish() {
    if (quiet_) return;
    if (tty_) {
      draw('\r');
      std::fputc('\n', stderr);
    } else if (last_tenth_ < 10) {
      draw('\n');
    }
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double mb_per_s() const { return seconds() > 0 ? static_cast<double>(done_) / 1e6 / seconds() : 0.0; }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(char end) {
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    constexpr int kWidth = 30;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < static_cast<int>(frac * kWidth); ++i) bar[static_cast<size_t>(i)] = '#';
    const double rate = mb_per_s();
    const double left = rate > 0 ? (static_cast<double>(total_ - done_) / 1e6) / rate : 0.0;
    std::fprintf(stderr, "%s [%s] %3.0f%% %.1f/%.1f MB %.2f MB/s %.0fs left%c", what_.c_str(), bar.c_str(), 100 * frac,
                 static_cast<double>(done_) / 1e6, static_cast<double>(total_) / 1e6, rate, left, end);
    std::fflush(stderr);
  }
  std::string what_;
  uint64_t total_, done_ = 0;
  bool quiet_, tty_;
  Clock::time_point start_, last_{};
  int last_tenth_ = -1;
};

}  // namespace trident::apps
