// Groups whose members run on several hosts (Note [spanning groups] in group.hpp): the host group,
// the cross ranks, and the exchanges through the bootstrap with their agreement on the call.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow {

void Group::make_spanning() {
  // Hosts in the order of their first member in group order: every member orders them alike,
  // whatever numbers its bootstrap gives them (the sum across hosts follows this order).
  const int my_host = bootstrap_->host_of(bootstrap_->rank());
  std::vector<int> host_ids;                     // by host order
  std::vector<std::vector<int>> by_host;         // group ranks of each host, in group order
  for (int r = 0; r < size(); ++r) {
    const int h = bootstrap_->host_of(ranks_[size_t(r)]);
    size_t i = size_t(std::find(host_ids.begin(), host_ids.end(), h) - host_ids.begin());
    if (i == host_ids.size()) host_ids.push_back(h), by_host.emplace_back();
    by_host[i].push_back(r);
  }
  hosts_ = int(by_host.size());
  host_rank_.assign(ranks_.size(), -1);
  std::vector<int> mine;  // global ranks of this host's members, in group order
  const size_t my_index =
      size_t(std::find(host_ids.begin(), host_ids.end(), my_host) - host_ids.begin());
  const std::vector<int>& here = by_host[my_index];
  for (size_t i = 0; i < here.size(); ++i) {
    host_rank_[size_t(here[i])] = int(i);
    mine.push_back(ranks_[size_t(here[i])]);
  }
  host_sorted_ = mine;
  std::sort(host_sorted_.begin(), host_sorted_.end());
  uniform_ = true;
  for (const std::vector<int>& rs : by_host) uniform_ = uniform_ && rs.size() == here.size();
  if (uniform_) {
    const size_t l = size_t(host_rank_[size_t(rank_)]);
    for (const std::vector<int>& rs : by_host) cross_.push_back(ranks_[size_t(rs[l])]);
  }
  host_ = std::make_shared<Group>(bootstrap_, fmt::format("{}@host{}", name_, my_index),
                                  std::move(mine));
}

int Group::host_rank_of(int group_rank) const {
  return host_ ? host_rank_.at(size_t(group_rank)) : group_rank;
}

int Group::region_index(int group_rank) const {
  if (!host_) return member_index(group_rank);
  if (host_rank_.at(size_t(group_rank)) < 0) return -1;
  const int global = ranks_[size_t(group_rank)];
  return int(std::lower_bound(host_sorted_.begin(), host_sorted_.end(), global) -
             host_sorted_.begin());
}

int Group::host_peer(int group_rank, std::string_view op) const {
  const int h = host_rank_.at(size_t(group_rank));
  SF_CHECK(h >= 0,
           "{}: rank {} of group '{}' runs on {} and rank {} on {}: a signal or a load reaches "
           "only members on one's own host (Note [spanning groups]); move data across hosts with "
           "a collective (collective_permute, all_gather_out, all_to_all)",
           op, ranks_[size_t(group_rank)], name_,
           bootstrap_->host_name(ranks_[size_t(group_rank)]), bootstrap_->rank(),
           bootstrap_->host_name(bootstrap_->rank()));
  return h;
}

namespace {
// Leads the call text of a member that failed before the exchange (Group::fail_across).
constexpr std::string_view kFailed = "\x02" "failed" "\x02";
}  // namespace

void Group::fail_across(const CollectiveCall& call, const Error& e) {
  if (!host_ || !uniform_) return;
  std::vector<int> sorted = cross_;
  std::sort(sorted.begin(), sorted.end());
  std::string text = std::string(kFailed) + e.what();
  const uint32_t n = uint32_t(text.size());
  std::string blob(4, '\0');
  std::memcpy(blob.data(), &n, 4);
  blob.append(text);
  try {
    bootstrap_->exchange(sorted, name_ + "@across", std::move(blob), call.op);
  } catch (const Error&) {
    // A partner gone too: its own error says so.
  }
}

std::vector<std::string> Group::agreed_exchange(const std::vector<int>& members,
                                                const std::string& tag, std::string_view op,
                                                const CollectiveCall* call, std::string payload) {
  check_alive(op);
  const std::string text = call_text(op, call);
  const uint32_t n = uint32_t(text.size());
  std::string blob(4, '\0');
  std::memcpy(blob.data(), &n, 4);
  blob.append(text).append(payload);
  std::vector<std::string> all;
  try {
    all = bootstrap_->exchange(members, tag, std::move(blob), op);
    std::vector<std::string> texts(all.size());
    bool same = true;
    for (size_t i = 0; i < all.size(); ++i) {
      uint32_t len = 0;
      SF_CHECK(all[i].size() >= 4, "{}: malformed exchange from rank {}", op, members[i]);
      std::memcpy(&len, all[i].data(), 4);
      SF_CHECK(all[i].size() >= 4 + size_t(len), "{}: malformed exchange from rank {}", op,
               members[i]);
      texts[i] = all[i].substr(4, len);
      all[i].erase(0, 4 + size_t(len));
      if (texts[i].rfind(kFailed, 0) == 0)
        throw_error(ErrorCode::PeerFailure,
                    "{}: rank {} failed ({}) while rank {} waited for it in group '{}'", op,
                    members[i], texts[i].substr(kFailed.size()), bootstrap_->rank(), name_);
      same = same && texts[i] == text;
    }
    if (!same) disagree_among(op, members, texts);
  } catch (const Error& e) {
    poison(e);  // Note [poisoned groups]
    throw;
  }
  return all;
}

std::vector<std::string> Group::exchange(const CollectiveCall& call, std::string payload) {
  std::vector<std::string> by_sorted =
      agreed_exchange(sorted_, name_, call.op, &call, std::move(payload));
  std::vector<std::string> out(ranks_.size());
  for (int r = 0; r < size(); ++r) out[size_t(r)] = std::move(by_sorted[size_t(member_index(r))]);
  return out;
}

std::vector<std::string> Group::exchange_across(const CollectiveCall& call, std::string payload) {
  SF_ASSERT(host_ && uniform_);
  std::vector<int> sorted = cross_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> by_sorted =
      agreed_exchange(sorted, name_ + "@across", call.op, &call, std::move(payload));
  std::vector<std::string> out(cross_.size());
  for (size_t h = 0; h < cross_.size(); ++h) {
    const size_t i = size_t(std::lower_bound(sorted.begin(), sorted.end(), cross_[h]) -
                            sorted.begin());
    out[h] = std::move(by_sorted[i]);
  }
  return out;
}

}  // namespace symmflow
