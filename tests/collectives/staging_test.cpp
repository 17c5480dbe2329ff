// Note [one-shot staging]: back-to-back one-shot all-reduces through the group's two staging
// halves, with ranks skewed by random pauses, interleaved with other collectives: a rank that ran
// ahead and overwrote a half a slow peer still reads would show up as a wrong sum.
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/workspace.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::testing {
namespace {

TEST(OneShotStaging, BackToBackCallsWithSkewedRanks) {
  Registry::global();
  ScopedTunables quick(oversubscribed_tunables());
  for (int world : {2, 3, 4, 8}) {
    const int iters = world == 8 ? 300 : 1000;
    auto errors = run_threads_collect(
        world,
        [&](Runtime& rt) {
          const int64_t n = 37;
          Tensor x = empty_symmetric({n}, DType::i64, "world");
          Tensor out = Tensor::empty({n}, DType::i64);
          std::mt19937 rng(uint32_t(rt.rank() * 7919 + world));
          for (int it = 0; it < iters; ++it) {
            for (int64_t i = 0; i < n; ++i) x.data<int64_t>()[i] = rt.rank() * 100000 + it * 10 + i;
            if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
            if (it % 5 == 4) {
              all_reduce(x, "sum", "world");  // another collective in between (in place)
              for (int64_t i = 0; i < n; ++i) {
                int64_t want = 0;
                for (int r = 0; r < world; ++r) want += r * 100000 + it * 10 + i;
                ASSERT_EQ(x.data<int64_t>()[i], want) << "all_reduce, iteration " << it;
              }
              continue;
            }
            call("symm_mem::one_shot_all_reduce_out", {x, "sum", "world", out});
            // The input is free again at once: overwrite it before peers are done with this call.
            for (int64_t i = 0; i < n; ++i) x.data<int64_t>()[i] = -1;
            for (int64_t i = 0; i < n; ++i) {
              int64_t want = 0;
              for (int r = 0; r < world; ++r) want += r * 100000 + it * 10 + i;
              ASSERT_EQ(out.data<int64_t>()[i], want) << "world " << world << " rank " << rt.rank()
                                                      << " iteration " << it << " element " << i;
            }
          }
        },
        ThreadsOptions{20});
    for (int r = 0; r < world; ++r) EXPECT_FALSE(errors[size_t(r)]) << "rank " << r;
  }
}

}  // namespace
}  // namespace symmflow::testing
