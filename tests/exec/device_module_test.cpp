// The cuda module loads on first use (Note [device modules] in src/exec/device_module.cpp):
// - `symmflow --version` and `symmflow compile examples/tp_mlp.sf` map no CUDA library
//   (LD_DEBUG=libs lists every library the loader maps; the list must name libsymmflow.so and no
//   libcuda*, libcublas*, libnvrtc*) and start in under 50 ms (5 runs: the median CPU time, and
//   the best wall time on a machine with a core to spare; the median wall time is printed);
// - `--device cuda` does load the module (the same listing then names libcudart), or says the
//   build has no cuda backend;
// - the first device_module() call maps the module (/proc/self/maps, in a child process), and a
//   missing module or a device type without one is refused with the exact message.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "symmflow/core/error.hpp"
#include "symmflow/exec/device_module.hpp"

extern char** environ;

namespace symmflow {
namespace {

const std::string kSymmflow = std::string(SYMMFLOW_BIN_DIR) + "/bin/symmflow";
const std::string kExamples = SYMMFLOW_EXAMPLES_DIR;
const std::array<const char*, 3> kCudaLibraries = {"libcuda", "libcublas", "libnvrtc"};

// stdout and stderr of `command` (run by sh), with its exit status.
std::pair<std::string, int> run_shell(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {"popen failed", -1};
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// The libraries the dynamic loader maps for `args` of symmflow (LD_DEBUG=libs), with the output.
std::string loader_trace(const std::string& args) {
  return run_shell(fmt::format("LD_DEBUG=libs '{}' {}", kSymmflow, args)).first;
}

std::vector<std::string> cuda_libraries_in(const std::string& trace) {
  std::vector<std::string> found;
  std::istringstream lines(trace);
  for (std::string line; std::getline(lines, line);) {
    for (const char* lib : kCudaLibraries) {
      if (line.find(lib) != std::string::npos) found.push_back(line);
    }
  }
  return found;
}

// One run of symmflow with `args` (output to /dev/null): milliseconds from spawn to exit, and
// the CPU time (user + system) it took, which a machine busy with other work does not inflate.
struct RunTime {
  double wall_ms = 1e9, cpu_ms = 1e9;
};
RunTime run_time(const std::vector<std::string>& args) {
  std::vector<char*> argv{const_cast<char*>(kSymmflow.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, kSymmflow.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return {};
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  const auto end = std::chrono::steady_clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  auto ms = [](const timeval& t) { return double(t.tv_sec) * 1e3 + double(t.tv_usec) / 1e3; };
  return {std::chrono::duration<double, std::milli>(end - start).count(),
          ms(usage.ru_utime) + ms(usage.ru_stime)};
}

// Over `runs` runs: the median wall time, the best wall time and the median CPU time.
struct StartUp {
  double median_wall_ms, best_wall_ms, median_cpu_ms;
};
StartUp start_up(const std::vector<std::string>& args, int runs) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < runs; ++i) {
    const RunTime t = run_time(args);
    wall.push_back(t.wall_ms);
    cpu.push_back(t.cpu_ms);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], wall.front(), cpu[cpu.size() / 2]};
}

bool sanitized() {
#if defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN)
  return true;
#else
  return false;
#endif
}

bool module_built() { return std::ifstream(exec::device_module_path(DeviceType::cuda)).good(); }

std::string self_maps() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream s;
  s << maps.rdbuf();
  return s.str();
}

TEST(CudaModule, CpuCommandsMapNoCudaLibrary) {
  for (const std::string& args :
       {std::string("--version"), fmt::format("compile '{}/tp_mlp.sf'", kExamples)}) {
    const std::string trace = loader_trace(args);
    EXPECT_NE(trace.find("libsymmflow.so"), std::string::npos)
        << "LD_DEBUG=libs listed nothing for symmflow " << args << ":\n" << trace;
    EXPECT_EQ(cuda_libraries_in(trace), std::vector<std::string>{})
        << "symmflow " << args << " mapped a CUDA library";
  }
}

// The start-up work is the CPU time (user + system: loading and relocating the libraries, page
// faults, static initializers), which other work on a shared machine does not inflate; it is
// asserted under 50 ms. The best wall time is asserted too when the machine has a core to spare
// (load average below the cores); the wall-clock median is printed either way.
TEST(CudaModule, CpuCommandsStartUnder50Ms) {
  double load[1] = {0};
  const bool idle = ::getloadavg(load, 1) == 1 && load[0] < double(::sysconf(_SC_NPROCESSORS_ONLN));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--version"}, {"compile", kExamples + "/tp_mlp.sf"}}) {
    const StartUp t = start_up(args, 5);
    std::printf("symmflow %s: median %.1f ms, best %.1f ms, median CPU time %.1f ms (5 runs; "
                "load average %.1f)\n",
                args[0].c_str(), t.median_wall_ms, t.best_wall_ms, t.median_cpu_ms, load[0]);
    if (sanitized()) continue;  // timings under sanitizers are not start-up times
    EXPECT_LT(t.median_cpu_ms, 50.0) << "symmflow " << args[0];
    if (idle) {
      EXPECT_LT(t.best_wall_ms, 50.0) << "symmflow " << args[0];
    }
  }
}

TEST(CudaModule, DeviceCudaLoadsTheModule) {
  const std::string trace =
      loader_trace(fmt::format("run '{}/tp_mlp_small.sf' --device cuda", kExamples));
  if (module_built()) {
    EXPECT_NE(trace.find("libsymmflow_cuda.so"), std::string::npos) << trace;
    EXPECT_NE(trace.find("libcudart"), std::string::npos) << trace;
  } else {
    EXPECT_NE(trace.find("error: --device cuda: this symmflow was built without the cuda backend"),
              std::string::npos)
        << trace;
  }
}

// The child of FirstUseMapsTheModule: loads the module and checks /proc/self/maps before and
// after; exits 0 with "loaded once" on stderr, else 1 naming what failed.
[[noreturn]] void load_module_and_check() {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "%s\n", what.c_str());
    std::_Exit(1);
  };
  if (exec::device_module_loaded(DeviceType::cuda)) fail("loaded before the first use");
  if (self_maps().find("libcudart") != std::string::npos) fail("libcudart mapped before");
  try {
    const exec::DeviceModule& m = exec::device_module(DeviceType::cuda, "test");
    if (!exec::device_module_loaded(DeviceType::cuda)) fail("not registered after loading");
    if (m.device_count() < 0) fail("negative device count");
    if (self_maps().find("libsymmflow_cuda.so") == std::string::npos) fail("module not mapped");
    if (self_maps().find("libcudart") == std::string::npos) fail("libcudart not mapped");
    if (&exec::device_module(DeviceType::cuda, "test") != &m) fail("loaded twice");
  } catch (const std::exception& e) {
    fail(e.what());
  }
  std::fprintf(stderr, "loaded once\n");
  std::_Exit(0);
}

// In a child process, so that the module stays out of this process (the tests after this one
// expect no cuda backend).
TEST(CudaModule, FirstUseMapsTheModule) {
  ASSERT_FALSE(exec::device_module_loaded(DeviceType::cuda));
  if (!module_built()) {
    const std::string path = exec::device_module_path(DeviceType::cuda);
    try {
      exec::device_module(DeviceType::cuda, "test");
      FAIL() << "no module, no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("test: this symmflow was built without the cuda backend (no {})", path));
    }
    return;
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(load_module_and_check(), ::testing::ExitedWithCode(0), "loaded once");
  EXPECT_FALSE(exec::device_module_loaded(DeviceType::cuda));
}

TEST(CudaModule, MissingModuleIsRefused) {
  ::setenv("SYMMFLOW_CUDA_MODULE", "/nonexistent/libsymmflow_cuda.so", 1);
  try {
    exec::device_module(DeviceType::cuda, "--device cuda");
    FAIL() << "a missing module loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--device cuda: the cuda backend module /nonexistent/libsymmflow_cuda.so does not "
              "exist (SYMMFLOW_CUDA_MODULE names another path)");
  }
  ::unsetenv("SYMMFLOW_CUDA_MODULE");
  EXPECT_FALSE(exec::device_module_loaded(DeviceType::cuda));
}

TEST(CudaModule, CpuHasNoModule) {
  try {
    exec::device_module(DeviceType::cpu, "test");
    FAIL() << "cpu has no module";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "device modules: cpu has none (only cuda is a module)");
  }
}

}  // namespace
}  // namespace symmflow
