// Note [measured kernel choice] (kernel_choice.hpp): timing of the candidates, the in-memory and
// on-disk caches, and the record that explain's GPU report prints.
#include "kernels/cuda/choice/kernel_choice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>

#include "runtime/cuda/check.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

constexpr int kTimedRuns = 5;

// Note [slow candidates stop early]: a candidate whose first timed run (after its warm-up, so
// without one-time set-up) takes more than kFarSlower times the best median so far cannot win,
// and its other runs would only cost compile time: symmflow's own attention kernel at an
// 8192-token prefill runs 654 ms a call against cuDNN's 2 ms (two H200s, 2026-11-29), six runs
// 3.9 s of a first call. It stops there; its one run is what explain shows, marked so.
constexpr double kFarSlower = 8.0;

struct Timing {
  double us = 0;
  bool stopped_early = false;
};

struct State {
  std::mutex mutex;
  std::map<std::string, size_t> by_key;        // full key -> index into `made`
  std::vector<KernelChoice> made;
  std::map<std::string, std::string> on_disk;  // full key -> chosen name
  bool disk_loaded = false;
  std::string forced;
};
State& state() {
  static State s;
  return s;
}

// The GPU's model and the runtime's version: part of every cached key.
const std::string& device_part() {
  thread_local int cached_device = -1;
  thread_local std::string cached;
  int device = 0, runtime = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  if (device == cached_device) return cached;
  cudaDeviceProp prop{};
  SF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  SF_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  cached = fmt::format("{} sm{}{} cudart{}", prop.name, prop.major, prop.minor, runtime);
  cached_device = device;
  return cached;
}

// Lines "op \t key \t chosen"; tabs and newlines never occur in keys (fmt of numbers and names).
void load_disk(State& s) {
  if (s.disk_loaded) return;
  s.disk_loaded = true;
  const std::string path = kernel_choice_cache_path();
  if (path.empty()) return;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos || tab == 0) continue;
    s.on_disk[line.substr(0, tab)] = line.substr(tab + 1);
  }
}

void append_disk(const std::string& full_key, const std::string& chosen) {
  const std::string path = kernel_choice_cache_path();
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::app);
  if (out) out << full_key << '\t' << chosen << '\n';
}

// The thread's side stream for timing during a capture (one per thread and GPU, never freed).
void* side_stream() {
  thread_local int device = -1;
  thread_local cudaStream_t stream = nullptr;
  int current = 0;
  SF_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    device = current;
  }
  return stream;
}

// Median microseconds of kTimedRuns runs of `run` on the current stream, after one warm-up run;
// or its first run alone when that exceeds give_up_above_us (> 0: Note [slow candidates stop
// early]).
Timing time_us(const std::function<void()>& run, double give_up_above_us) {
  auto stream = static_cast<cudaStream_t>(current_stream());
  run();
  std::vector<double> us;
  cudaEvent_t start = nullptr, stop = nullptr;
  SF_CUDA_CHECK(cudaEventCreate(&start));
  SF_CUDA_CHECK(cudaEventCreate(&stop));
  try {
    for (int i = 0; i < kTimedRuns; ++i) {
      SF_CUDA_CHECK(cudaEventRecord(start, stream));
      run();
      SF_CUDA_CHECK(cudaEventRecord(stop, stream));
      SF_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      SF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(double(ms) * 1000.0);
      if (give_up_above_us > 0 && us.back() > give_up_above_us) break;
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (us.size() == 1 && kTimedRuns > 1) return {us[0], true};
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], false};
}

size_t index_of(const std::vector<KernelCandidate>& c, const std::string& name) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].name == name) return i;
  return c.size();
}

}  // namespace

RelaxedCapture::RelaxedCapture() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  SF_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  saved_ = int(mode);
}
RelaxedCapture::~RelaxedCapture() {
  auto mode = cudaStreamCaptureMode(saved_);
  cudaThreadExchangeStreamCaptureMode(&mode);
}

std::string kernel_choice_cache_path() {
  std::filesystem::path dir;
  if (const char* d = std::getenv("SYMMFLOW_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::filesystem::path(x) / "symmflow";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::filesystem::path(h) / ".cache" / "symmflow";
  } else {
    return "";
  }
  return (dir / "kernel-choices-v1.tsv").string();
}

size_t choose_kernel(std::string_view op, const std::string& key,
                     const std::vector<KernelCandidate>& candidates,
                     const std::vector<RefusedKernel>& refused) {
  SF_CHECK(!candidates.empty(), "{}: no kernel can run this call ({})", op, key);
  const std::string full = fmt::format("{}\t{} | {}", op, key, device_part());
  State& s = state();
  KernelChoice choice{std::string(op), key, "", "", {}, {}, refused};
  {
    std::lock_guard lock(s.mutex);
    if (!s.forced.empty()) {
      if (const size_t i = index_of(candidates, s.forced); i < candidates.size()) {
        choice.chosen = s.forced, choice.how = "forced";
        if (auto it = s.by_key.find(full); it != s.by_key.end()) {
          s.made[it->second] = choice;
        } else {
          s.by_key[full] = s.made.size();
          s.made.push_back(choice);
        }
        return i;
      }
    }
    if (auto it = s.by_key.find(full); it != s.by_key.end()) {
      const size_t i = index_of(candidates, s.made[it->second].chosen);
      if (i < candidates.size()) return i;
    }
    load_disk(s);
    if (auto it = s.on_disk.find(full); it != s.on_disk.end()) {
      if (index_of(candidates, it->second) < candidates.size()) {
        choice.chosen = it->second;
        choice.how = "cached on disk";
      }
    }
  }
  if (choice.chosen.empty()) {
    if (candidates.size() == 1) {
      choice.chosen = candidates[0].name, choice.how = "only candidate";
    } else if (!tunables().cuda_kernel_search) {
      choice.chosen = candidates[0].name, choice.how = "search off";
    } else {
      std::optional<RelaxedCapture> relaxed;
      std::optional<StreamGuard> side;
      if (capturing()) relaxed.emplace(), side.emplace(side_stream());
      double best = 0;
      for (const KernelCandidate& c : candidates) {
        try {
          const Timing t = time_us(c.run, choice.chosen.empty() ? 0.0 : kFarSlower * best);
          choice.median_us.emplace_back(c.name, t.us);
          if (t.stopped_early) choice.stopped_early.push_back(c.name);
          if (choice.chosen.empty() || t.us < best) choice.chosen = c.name, best = t.us;
        } catch (const std::exception& e) {
          choice.refused.push_back({c.name, fmt::format("failed when timed: {}", e.what())});
        }
      }
      SF_CHECK(!choice.chosen.empty(), "{}: every kernel failed for this call ({}): {}", op, key,
               choice.refused.back().why);
      choice.how = relaxed ? "measured during capture" : "measured";
      append_disk(full, choice.chosen);
    }
  }
  std::lock_guard lock(s.mutex);
  s.by_key[full] = s.made.size();
  s.made.push_back(choice);
  s.on_disk[full] = choice.chosen;
  return index_of(candidates, choice.chosen);
}

std::vector<KernelChoice> kernel_choices() {
  std::lock_guard lock(state().mutex);
  return state().made;
}

std::string format_kernel_choices() {
  std::string out;
  for (const KernelChoice& c : kernel_choices()) {
    out += fmt::format("{} {}: {} ({}", c.op, c.key, c.chosen, c.how);
    for (size_t i = 0; i < c.median_us.size(); ++i) {
      const std::string& name = c.median_us[i].first;
      const bool once = std::find(c.stopped_early.begin(), c.stopped_early.end(), name) !=
                        c.stopped_early.end();
      out += fmt::format("{}{} {:.1f} us{}", i ? ", " : "; ", name, c.median_us[i].second,
                         once ? " (one run: far slower)" : "");
    }
    for (size_t i = 0; i < c.refused.size(); ++i)
      out += fmt::format("{}{}: {}", i ? "; " : "; refused: ", c.refused[i].name,
                         c.refused[i].why);
    out += ")\n";
  }
  return out;
}

void force_kernel(std::string name) {
  std::lock_guard lock(state().mutex);
  state().forced = std::move(name);
}

void reset_kernel_choices() {
  std::lock_guard lock(state().mutex);
  state().by_key.clear();
  state().made.clear();
  state().on_disk.clear();
  state().disk_loaded = false;
}

}  // namespace symmflow::cuda
