// The rendezvous store of a real run, in place of c10d::TCPStore: a key-value store that
// ProcessGroupGloo uses to exchange its ranks' addresses, served over TCP only to clients that
// prove they hold the run's secret (real/auth.h). c10d's TCPStore authenticates no one (any
// process that reaches its port reads and overwrites keys, so an impostor can take a rank) and
// allocates whatever length a request names (17 bytes make it allocate 1 GiB); this one refuses a
// client that cannot prove the secret with a message, and bounds every size it reads.
//
// Protocol (integers big-endian). Every frame is a u32 length, then that many bytes.
//   server -> client  "RVS1" nonce_s (16 random bytes, new per connection)
//   client -> server  "RVC1" nonce_c (16) MAC(secret; "store-client", nonce_s, nonce_c)
//   server -> client  "OK" MAC(secret; "store-server", nonce_c, nonce_s), or "NO" and why, and
//                     closes. The client checks the server's MAC too: a process that took the
//                     port first cannot pose as the store.
// Then requests, each answered by one reply, in order (opcodes in auth_store.cc). The connection
// is authenticated once; its bytes are not encrypted (TCP on a trusted network, or loopback).
//
// Limits (StoreLimits): a frame before the handshake is at most 64 bytes and the handshake must
// end within 10 s; keys are at most 4 KiB, values 1 MiB, everything stored 256 MiB; at most 64
// connections may be unauthenticated at once. A client over a limit gets an error reply (or, for a
// frame too long to read, is disconnected); the server goes on. Beyond 64 unauthenticated
// connections, new ones wait in the listen backlog until some finish or time out.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace rv {

// A store value from text and back (values are bytes; keys and the values this project keeps in
// the store are text).
inline std::vector<uint8_t> store_value(std::string_view s) { return {s.begin(), s.end()}; }
inline std::string store_text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

struct StoreLimits {
  size_t max_key = 4096;
  size_t max_value = size_t{1} << 20;
  size_t max_total = size_t{256} << 20;  // keys and values together
  size_t max_wait_keys = 100000;         // keys in one check or wait
  int max_unauthenticated = 64;  // connections that have not finished the handshake (more wait)
  int max_clients = 1 << 16;     // authenticated connections
  double handshake_s = 10;       // seconds a new connection has to prove the secret
};

// Serves the store from a thread of its own until destroyed.
class AuthStoreServer {
 public:
  // Binds `addr` (an IPv4 or IPv6 address or a host name) at `port` (0: a free port, which port()
  // then gives; holding the socket from the start, no other process can take it in between) and
  // starts serving. rv::Error if it cannot bind (the address is not this machine's, the port is
  // taken).
  AuthStoreServer(std::string secret, const std::string& addr, int port, StoreLimits limits = {});
  ~AuthStoreServer();
  AuthStoreServer(const AuthStoreServer&) = delete;
  AuthStoreServer& operator=(const AuthStoreServer&) = delete;

  int port() const;
  // Connections refused so far (a wrong or missing proof, a malformed handshake, too many at
  // once), and what the last one was told. Each refusal is also printed on stderr.
  int64_t refused() const;
  std::string last_refusal() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client of an AuthStoreServer, as a c10d::Store (for ProcessGroupGloo and c10d::PrefixStore).
// Thread-safe: requests are serialised. Errors are rv::PeerError (the store is gone, timed out or
// is not this run's) or rv::InputError (the store refused this client's proof: another run's
// secret).
class AuthStore : public c10d::Store {
 public:
  // Connects to addr:port, retrying until `timeout` (the server may not be up yet), and completes
  // the handshake.
  AuthStore(const std::string& secret, const std::string& addr, int port,
            std::chrono::milliseconds timeout);
  ~AuthStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  // Waits (up to the timeout) for the key, as c10d's stores do.
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // A client of its own (a connection of its own, proved again) to the same server, with this
  // one's timeout. LibTorch 2.5 and later make c10d::Store::clone() pure virtual and override it
  // with this; earlier ones have none, so it is declared without `override` to build with both.
  c10::intrusive_ptr<c10d::Store> clone();

 private:
  // One request and its reply; on any failure the connection is closed (later requests fail).
  std::string request(const std::string& frame, std::chrono::milliseconds reply_within);
  std::string exchange(const std::string& frame, std::chrono::milliseconds reply_within);
  std::string secret_, addr_;  // for clone()
  int port_ = 0;
  std::string where_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace rv
