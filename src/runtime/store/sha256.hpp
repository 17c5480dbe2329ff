// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the TCP store's handshake (Note [tcp
// store authentication] in tcp_protocol.hpp). Small and dependency-free: the store must not pull
// a crypto library into every build. Private header.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace symmflow::store_detail {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);
std::string to_hex(const Digest& d);
// Compares in time independent of where the strings differ (no early exit on the first byte).
bool same_secret_text(std::string_view a, std::string_view b);

}  // namespace symmflow::store_detail
