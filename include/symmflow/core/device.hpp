// Devices and where a tensor's storage lives.
#pragma once

#include <string>

namespace symmflow {

enum class DeviceType { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:1", "meta"
  static Device cpu() { return {}; }
  static Device meta() { return {DeviceType::meta, 0}; }
  static Device cuda(int i) { return {DeviceType::cuda, i}; }
};

// The device the calling thread is bound to: cpu unless a backend bound it to a GPU
// (cuda::bind_device()). An op without any tensor argument or return (symm_mem::barrier) runs on
// this device's backend.
Device thread_device();
void set_thread_device(Device device);
// Sets the thread's device for a scope (the interpreter and the cpu executor run host programs on
// GPU-bound threads too).
class ThreadDeviceGuard {
 public:
  explicit ThreadDeviceGuard(Device device) : saved_(thread_device()) { set_thread_device(device); }
  ~ThreadDeviceGuard() { set_thread_device(saved_); }
  ThreadDeviceGuard(const ThreadDeviceGuard&) = delete;
  ThreadDeviceGuard& operator=(const ThreadDeviceGuard&) = delete;

 private:
  Device saved_;
};

// Which allocator colour a storage came from: per-device regular memory or a symmetric heap.
enum class MemoryKind { regular, symmetric };

}  // namespace symmflow
