// The store transport's exchange, the engine of groups that span hosts (contract in
// store_bootstrap.hpp; Note [store exchanges] below).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store_bootstrap.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow {

namespace {
using Millis = std::chrono::milliseconds;
}  // namespace

// Note [store exchanges]: a collective of a group that spans hosts exchanges its data through
// the store on every call, so its keys cannot be new per call (a store never forgets a key: a
// training run would leave gigabytes in the server). Member m of a member set writes its data
// for exchange number n of a tag (a group's name) to x/<tag>/<set>/<m>/<n mod 2> (in pieces of at most kPiece bytes, the TCP
// store's messages being at most 16 MiB), then adds 1 to its counter x/<tag>/<set>/<m>/n, which
// then reads n + 1; a reader waits for every member's counter to reach n + 1 and reads the data.
// Writing slot n mod 2 again at exchange n + 2 is safe: by then the writer passed exchange
// n + 1, which needed every member's counter at n + 2, written after that member had read
// exchange n.
std::vector<std::string> StoreBootstrap::exchange(const std::vector<int>& members,
                                                  const std::string& tag, std::string data,
                                                  std::string_view op) {
  constexpr size_t kPiece = size_t(8) << 20;
  auto pieces = [](size_t bytes) { return std::max<size_t>(1, (bytes + kPiece - 1) / kPiece); };
  std::lock_guard lock(mutex_);
  SF_CHECK(std::find(members.begin(), members.end(), rank_) != members.end(),
           "{}: rank {} is not among the members {}", op, rank_, fmt::join(members, ", "));
  learn(members, op);
  const uint64_t n = xseq_[{tag, members}]++;
  const std::string set = fmt::format("x/{}/{:016x}-{}", tag, member_hash(members), members.size());
  const std::string mine = key(fmt::format("{}/{}/{}", set, rank_, n & 1));
  store_->set(mine, fmt::format("{}", data.size()));
  for (size_t i = 0; i < pieces(data.size()); ++i)
    store_->set(fmt::format("{}/{}", mine, i),
                data.substr(std::min(data.size(), i * kPiece), kPiece));
  store_->add(key(fmt::format("{}/{}/n", set, rank_)), 1);
  std::vector<std::string> out(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m == rank_) {
      out[i] = data;
      continue;
    }
    await_count(key(fmt::format("{}/{}/n", set, m)), int64_t(n) + 1, m, op);
    const std::string theirs = key(fmt::format("{}/{}/{}", set, m, n & 1));
    const size_t bytes =
        std::strtoull(store_->get_value(theirs, Millis(0), op).c_str(), nullptr, 10);
    std::string& v = out[i];
    v.reserve(bytes);
    for (size_t p = 0; p < pieces(bytes); ++p)
      v += store_->get_value(fmt::format("{}/{}", theirs, p), Millis(0), op);
    SF_CHECK(v.size() == bytes, "{}: malformed exchange from rank {} ({} bytes, said {})", op, m,
             v.size(), bytes);
  }
  return out;
}

void StoreBootstrap::await_count(const std::string& counter, int64_t value, int rank,
                                 std::string_view op) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(timeout_s_);
  std::chrono::microseconds pause{20};
  for (;;) {
    if (store_->add(counter, 0) >= value) return;
    if (std::optional<RankFailure> f = failure(); f && f->rank != rank_)
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} failed ({}) while rank {} waited for rank {}", op, f->rank, f->what,
                  rank_, rank);
    if (finished_without(rank, counter) && store_->add(counter, 0) < value) {
      // Note [the cause before the departure] in wait.cpp
      if (std::optional<RankFailure> f = failure_now(); f && f->rank != rank_)
        throw_error(ErrorCode::PeerFailure,
                    "{}: rank {} failed ({}) while rank {} waited for rank {}", op, f->rank,
                    f->what, rank_, rank);
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} has finished (it left the world cleanly) while rank {} waited for "
                  "it",
                  op, rank, rank_);
    }
    if (std::chrono::steady_clock::now() - start > limit)
      throw_error(ErrorCode::Timeout, "{}: timed out after {} s on rank {} waiting for rank {}", op,
                  timeout_s_, rank_, rank);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace symmflow
