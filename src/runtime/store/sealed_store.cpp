// SealedStore: every value symmflow writes to a store it does not trust is sealed with the job's
// secret (contract in store.hpp).
//
// Note [sealed store values]: the PyTorch path meets through the launcher's store (torchrun's
// c10d TCPStore), which has no authentication: any local process could read the ranks' hellos
// (pid, host, CPU set) and write the poison key, and both ranks died blaming rank 1 (issue 39
// item 7). symmflow cannot make that store authenticate its clients, so it makes the values
// useless to anyone without the job's secret (Note [store secret] in tcp_protocol.hpp):
//   sealed = "sf1" nonce mac ciphertext      nonce: 16 random bytes (32 hex); mac: 64 hex
//   ciphertext = value XOR keystream, keystream block i = HMAC(k_enc, nonce "\n" i)
//   mac = HMAC(k_mac, key "\n" nonce "\n" ciphertext)
// with k_enc = HMAC(secret, "symmflow-seal/1 enc") and k_mac = HMAC(secret, "symmflow-seal/1
// mac"): HMAC-SHA-256 as a PRF in counter mode, then encrypt-then-MAC, the MAC binding the key
// (a value cannot be moved to another key; keys carry the world's prefix). A value that is not
// sealed, or whose MAC fails, is treated as absent (get returns none, wait goes on waiting) and
// reported once per key on stderr, so a planted poison or hello is ignored, not believed. What
// this cannot protect: counters (add), which the store computes itself: a process that reaches
// the store can bump a rank's join count (its init fails, as for a duplicate rank) or the
// poison claim (the failure is then still written: publish_poison writes it when no sealed
// poison is there). That is denial of service, never a value believed or read.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "sha256.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/store.hpp"
#include "tcp_protocol.hpp"

namespace symmflow {

using store_detail::Digest;
using store_detail::hmac_sha256;

namespace {

constexpr std::string_view kTag = "sf1";
constexpr size_t kNonceHex = 32;
constexpr size_t kMacHex = 64;
constexpr size_t kHeader = 3 + kNonceHex + kMacHex;

std::string as_text(const Digest& d) { return std::string(d.begin(), d.end()); }

// value XOR the keystream of `nonce` (its own inverse).
std::string apply_keystream(std::string_view k_enc, std::string_view nonce,
                            std::string_view value) {
  std::string out(value);
  for (size_t block = 0; block * 32 < out.size(); ++block) {
    Digest pad = hmac_sha256(k_enc, fmt::format("{}\n{}", nonce, block));
    for (size_t i = 0; i < 32 && block * 32 + i < out.size(); ++i)
      out[block * 32 + i] = char(uint8_t(out[block * 32 + i]) ^ pad[i]);
  }
  return out;
}

}  // namespace

SealedStore::SealedStore(std::shared_ptr<KeyValueStore> inner, std::string secret)
    : inner_(std::move(inner)) {
  SF_CHECK(inner_, "SealedStore: no store given");
  if (secret.empty()) secret = store_detail::resolve_store_secret(inner_->describe());
  k_enc_ = as_text(hmac_sha256(secret, "symmflow-seal/1 enc"));
  k_mac_ = as_text(hmac_sha256(secret, "symmflow-seal/1 mac"));
}

std::string SealedStore::seal(const std::string& key, const std::string& value) const {
  const std::string nonce = store_detail::random_hex(16);
  const std::string ciphertext = apply_keystream(k_enc_, nonce, value);
  const std::string mac =
      store_detail::to_hex(hmac_sha256(k_mac_, fmt::format("{}\n{}\n{}", key, nonce, ciphertext)));
  return std::string(kTag) + nonce + mac + ciphertext;
}

std::optional<std::string> SealedStore::open(const std::string& key,
                                             const std::string& sealed) const {
  if (sealed.size() >= kHeader && std::string_view(sealed).substr(0, 3) == kTag) {
    const std::string_view nonce = std::string_view(sealed).substr(3, kNonceHex);
    const std::string_view mac = std::string_view(sealed).substr(3 + kNonceHex, kMacHex);
    const std::string_view ciphertext = std::string_view(sealed).substr(kHeader);
    const std::string want = store_detail::to_hex(
        hmac_sha256(k_mac_, fmt::format("{}\n{}\n{}", key, nonce, ciphertext)));
    if (store_detail::same_secret_text(want, mac)) return apply_keystream(k_enc_, nonce, ciphertext);
  }
  report_foreign(key);
  return std::nullopt;
}

void SealedStore::report_foreign(const std::string& key) const {
  std::lock_guard lock(mutex_);
  if (!reported_.insert(key).second) return;
  ++foreign_;
  std::fprintf(stderr,
               "symmflow: ignoring key '%s' in %s: its value is not sealed with this job's store "
               "secret: another process wrote it, or a rank holds another secret (set the same "
               "SYMMFLOW_STORE_SECRET on every rank when their homes differ; Note [sealed store "
               "values])\n",
               key.c_str(), inner_->describe().c_str());
}

size_t SealedStore::foreign_keys() const {
  std::lock_guard lock(mutex_);
  return foreign_;
}

void SealedStore::set(const std::string& key, const std::string& value) {
  inner_->set(key, seal(key, value));
}

std::optional<std::string> SealedStore::get(const std::string& key, Millis timeout) {
  // A foreign value reads as absent: wait for a sealed one until the timeout.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    std::optional<std::string> raw = inner_->get(key, std::max(left, Millis(0)));
    if (!raw) return std::nullopt;
    if (std::optional<std::string> v = open(key, *raw)) return v;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min(Millis(5), left));
  }
}

bool SealedStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (!inner_->wait(keys, std::max(left, Millis(0)))) return false;
    bool sealed = true;
    for (const std::string& k : keys) {
      std::optional<std::string> raw = inner_->get(k, Millis(0));
      sealed = sealed && raw && open(k, *raw);
    }
    if (sealed) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::min(Millis(5), left));
  }
}

int64_t SealedStore::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);  // a counter: Note [sealed store values] says what is left
}

std::string SealedStore::describe() const { return inner_->describe(); }

}  // namespace symmflow
