// A real run's secret and the proofs built on it (HMAC-SHA256, OpenSSL).
//
// Every rank of a run holds the same secret. A process that connects to the run's rendezvous
// store, or opens a peer connection, proves that it holds it by a MAC over a nonce that the other
// side chose for this connection (so an old proof is worth nothing), and the store proves the same
// to it (real/auth_store.h, real/gloo_transport.h). The secret never travels.
//
// Where it comes from: `ravnest real` makes a new one for each run (new_secret()) and hands it to
// its ranks in a file only this user can read (RAVNEST_SECRET_FILE). Ranks started by hand on
// several machines read it from RAVNEST_SECRET_FILE (a file of at least 16 bytes that no other user
// may read) or RAVNEST_SECRET (the secret itself, at least 16 characters); without either they
// refuse to start (secret_from_environment(), rv::InputError: exit 2).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace rv::auth {

constexpr const char* kSecretEnv = "RAVNEST_SECRET";
constexpr const char* kSecretFileEnv = "RAVNEST_SECRET_FILE";
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;  // HMAC-SHA256

using Mac = std::array<uint8_t, kMacBytes>;

// `n` bytes from OpenSSL's CSPRNG. Throws rv::Error if it has none to give.
std::string random_bytes(size_t n);
// A new run secret: 32 random bytes, as 64 hex digits.
std::string new_secret();
// Writes `secret` to a new file at `path` that only this user can read (mode 0600, O_EXCL:
// never an existing file). Throws rv::Error.
void write_secret_file(const std::string& path, const std::string& secret);
// The secret of a run whose ranks were started by hand or by `ravnest real`: RAVNEST_SECRET_FILE
// (its bytes, less one final "\n" or "\r\n"), else RAVNEST_SECRET. rv::InputError saying what to
// set, or what is wrong with it (too short, too long, a file other users may read, a file that
// cannot be read).
std::string secret_from_environment();
// Whether RAVNEST_SECRET_FILE or RAVNEST_SECRET is set (non-empty).
bool secret_in_environment();

// HMAC-SHA256 under `secret` of the parts, each preceded by its length (so that no two lists of
// parts read as the same bytes).
Mac mac(const std::string& secret, std::initializer_list<std::string_view> parts);
// Whether `given` (kMacBytes long) equals `want`, in time that does not depend on where they
// differ.
bool same_mac(const Mac& want, std::string_view given);
// A 32-bit number as 4 big-endian bytes (for MAC parts).
std::string be32(uint32_t v);

}  // namespace rv::auth
