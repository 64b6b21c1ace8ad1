#include "parallel/pipeline/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace trident::parallel::pipeline {

std::string_view event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::Forward: return "forward";
    case EventKind::Backward: return "backward";
    case EventKind::Recompute: return "recompute";
    case EventKind::Send: return "send";
    case EventKind::Recv: return "recv";
  }
  return "?";
}

double timeline_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double theoretical_bubble(int64_t stages, int64_t micro_batches, int64_t chunks) {
  return static_cast<double>(stages - 1) / static_cast<double>(chunks * micro_batches + stages - 1);
}

double PipelineTrace::span() const {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : stages)
    for (const Event& e : s) {
      lo = std::min(lo, e.start);
      hi = std::max(hi, e.end);
    }
  return hi > lo ? hi - lo : 0.0;
}

double PipelineTrace::bubble_fraction() const {
  const double total = span() * static_cast<double>(stages.size());
  if (total <= 0) return 0.0;
  double busy = 0;
  for (const auto& s : stages)
    for (const Event& e : s)
      if (e.kind == EventKind::Forward || e.kind == EventKind::Backward) busy += e.end - e.start;
  return 1.0 - busy / total;
}

std::string PipelineTrace::chrome_json() const {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << "{\"traceEvents\": [\n";
  bool first = true;
  for (size_t s = 0; s < stages.size(); ++s) {
    o << (first ? "" : ",\n") << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << s
      << ", \"args\": {\"name\": \"stage " << s << "\"}}";
    first = false;
    for (const Event& e : stages[s])
      o << ",\n{\"name\": \"" << event_kind_name(e.kind) << " " << e.micro_batch
        << (chunks > 1 ? " chunk " + std::to_string(e.chunk) : std::string()) << "\", \"cat\": \""
        << event_kind_name(e.kind) << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << s << ", \"ts\": " << e.start * 1e6
        << ", \"dur\": " << (e.end - e.start) * 1e6 << ", \"args\": {\"micro_batch\": " << e.micro_batch
        << ", \"chunk\": " << e.chunk << "}}";
  }
  o << "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"stages\": " << stages.size()
    << ", \"micro_batches\": " << micro_batches << ", \"chunks\": " << chunks << ", \"bubble\": " << bubble_fraction()
    << ", \"theoretical_bubble\": " << theoretical_bubble(static_cast<int64_t>(stages.size()), micro_batches, chunks) << "}}\n";
  return o.str();
}

void PipelineTrace::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  TRIDENT_CHECK(f.good(), "cannot write the pipeline trace to '", path, "'");
  f << chrome_json();
  TRIDENT_CHECK(f.good(), "writing the pipeline trace to '", path, "' failed");
}

bool PipelineTrace::write_gantt_png(const std::string& path) const {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) return false;
  const std::string data = path + ".dat", script = path + ".gp";
  {
    // One box per forward (blue) / backward (green) / recompute (orange): x from start to end
    // in milliseconds, y the stage (stage 0 on top, as in the paper).
    std::ofstream d(data);
    TRIDENT_CHECK(d.good(), "cannot write '", data, "'");
    for (size_t s = 0; s < stages.size(); ++s)
      for (const Event& e : stages[s]) {
        int color = 0;
        if (e.kind == EventKind::Forward) color = 1;
        else if (e.kind == EventKind::Backward) color = 2;
        else if (e.kind == EventKind::Recompute) color = 3;
        else continue;
        const double lo = e.kind == EventKind::Recompute ? 0.1 : 0.35;
        d << e.start * 1e3 << ' ' << e.end * 1e3 << ' ' << static_cast<double>(s) - lo << ' '
          << static_cast<double>(s) + lo << ' ' << color << ' ' << e.micro_batch << '\n';
      }
    std::ofstream g(script);
    TRIDENT_CHECK(g.good(), "cannot write '", script, "'");
    g << "set terminal pngcairo size 1200," << 120 + 60 * stages.size() << "\n"
      << "set output '" << path << "'\n"
      << "set title 'pipeline: " << stages.size() << " stages, " << micro_batches << " micro-batches, bubble "
      << static_cast<int>(100 * bubble_fraction() + 0.5) << "% (theory "
      << static_cast<int>(100 * theoretical_bubble(static_cast<int64_t>(stages.size()), micro_batches, chunks) + 0.5)
      << "%)'\n"
      << "set xlabel 'time (ms)'\nset ylabel 'stage'\nset yrange [" << static_cast<double>(stages.size()) - 0.5
      << ":-0.5]\nset ytics 1\nunset key\n"
      << "set palette defined (1 '#4477cc', 2 '#44aa55', 3 '#ee9933')\nset cbrange [1:3]\nunset colorbox\n"
      << "plot '" << data << "' using (($1+$2)/2):(($3+$4)/2):(($2-$1)/2):(($4-$3)/2):5 with boxxyerror fs solid 0.8 "
      << "lc palette, '' using (($1+$2)/2):(($3+$4)/2):(sprintf('%d',$6)) with labels font ',8'\n";
  }
  const int rc = std::system(("gnuplot '" + script + "' > /dev/null 2>&1").c_str());
  std::error_code ec;
  std::filesystem::remove(data, ec);
  std::filesystem::remove(script, ec);
  TRIDENT_CHECK(rc == 0, "gnuplot failed (exit status ", rc, ") drawing '", path, "'");
  return true;
}

}  // namespace trident::parallel::pipeline
