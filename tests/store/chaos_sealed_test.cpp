// Chaos: a store other processes can write (issue 39 item 7; Note [sealed store values] in
// src/runtime/store/sealed_store.cpp). The PyTorch path meets through torchrun's TCPStore, which
// authenticates no one; symmflow seals its values there. Here a FileStore stands for that store
// and the "attacker" writes to it directly, as a local process without the secret would:
// - a sealed value cannot be read from the raw store, nor opened with another secret;
// - a planted or moved value reads as absent (a wait goes on), and is reported once;
// - a world meeting through a sealed store ignores a planted poison and still learns a real one,
//   even when the attacker bumped the poison claim first.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

using Millis = std::chrono::milliseconds;
const std::string kSecret = "a-job-secret-of-enough-bytes";

TEST(ChaosSealed, ValuesAreUnreadableWithoutTheSecret) {
  TempDir dir;
  auto raw = std::make_shared<FileStore>(dir.path());
  SealedStore sealed(raw, kSecret);
  const std::string hello = "2\n4242\nhost-a\nhost-a|pid:[1]\nff,";
  sealed.set("w/hello/0", hello);
  EXPECT_EQ(sealed.get("w/hello/0", Millis(0)), hello);
  EXPECT_EQ(SealedStore(raw, kSecret).get("w/hello/0", Millis(0)), hello);  // another rank
  const std::string stored = raw->get_value("w/hello/0", Millis(0));
  EXPECT_EQ(stored.rfind("sf1", 0), 0u);
  EXPECT_EQ(stored.find("4242"), std::string::npos) << stored;
  EXPECT_EQ(stored.find("host-a"), std::string::npos) << stored;
  sealed.set("w/hello/1", hello);  // a fresh nonce: another ciphertext for the same value
  EXPECT_NE(raw->get_value("w/hello/1", Millis(0)).substr(3), stored.substr(3));
  SealedStore other_job(raw, "another-secret-of-enough-bytes");
  EXPECT_EQ(other_job.get("w/hello/0", Millis(30)), std::nullopt);
  EXPECT_EQ(other_job.foreign_keys(), 1u);
}

TEST(ChaosSealed, PlantedAndMovedValuesReadAsAbsent) {
  TempDir dir;
  auto raw = std::make_shared<FileStore>(dir.path());
  SealedStore sealed(raw, kSecret);
  raw->set("w/poison", "1\nforged by another process");
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(sealed.get("w/poison", Millis(60)), std::nullopt);
  EXPECT_FALSE(sealed.wait({"w/poison"}, Millis(60)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(120));
  EXPECT_EQ(sealed.foreign_keys(), 1u);  // reported once per key
  raw->set("w/poison", "sf1" + std::string(96, '0') + "tampered");  // looks sealed, MAC fails
  EXPECT_EQ(sealed.get("w/poison", Millis(0)), std::nullopt);
  // A sealed value copied to another key does not open there (the MAC binds the key).
  sealed.set("w/hello/0", "mine");
  raw->set("w/hello/1", raw->get_value("w/hello/0", Millis(0)));
  EXPECT_EQ(sealed.get("w/hello/1", Millis(0)), std::nullopt);
  EXPECT_EQ(sealed.foreign_keys(), 2u);
  // A sealed value set later ends a wait that was looking at a planted one.
  std::thread late([&] {
    std::this_thread::sleep_for(Millis(50));
    SealedStore(raw, kSecret).set("w/poison", "1\nreal");
  });
  EXPECT_TRUE(sealed.wait({"w/poison"}, Millis(5000)));
  late.join();
  EXPECT_EQ(sealed.get("w/poison", Millis(0)), "1\nreal");
}

TEST(ChaosSealed, AWorldIgnoresAPlantedPoisonAndLearnsARealOne) {
  Registry::global();
  TempDir dir;
  auto raw = std::make_shared<FileStore>(dir.path());
  raw->set("w/poison", "0\nforged: rank 0 failed");
  raw->add("w/poison_claim", 1);  // the claim taken first by the attacker
  std::vector<std::string> errors(2);
  std::atomic<bool> looked{false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      StoreOptions o;
      o.store = std::make_shared<SealedStore>(std::make_shared<FileStore>(dir.path()), kSecret);
      o.rank = r;
      o.world_size = 2;
      o.prefix = "w";
      o.timeout_s = 10;
      Runtime rt(make_store_bootstrap(o));
      RuntimeScope scope(rt);
      Tensor x = empty_symmetric({3}, DType::f32, "world");
      for (int i = 0; i < 3; ++i) x.data<float>()[i] = float(r + 1);
      Tensor sum = call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor();
      for (int i = 0; i < 3; ++i) EXPECT_EQ(sum.data<float>()[i], 3.0f);
      rt.group("world")->barrier(0, "before abort");
      if (r == 1) {
        // Poisons through the store only: its runtime stays until rank 0 looked (leaving would
        // tell rank 0 through the group's pads instead).
        rt.abort("rank 1 gives up");
        while (!looked.load()) std::this_thread::sleep_for(Millis(5));
        return;
      }
      try {
        std::this_thread::sleep_for(Millis(300));  // past a store check
        call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
      looked.store(true);
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_NE(errors[0].find("rank 1 failed (rank 1 gives up)"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace symmflow::testing
