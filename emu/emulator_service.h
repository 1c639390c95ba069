// The network emulator shared by the node processes of one machine. The launcher (`ravnest real`)
// runs an EmulatorServer: one EmulatedNetwork for every node of the run, on the launcher's clock.
// Each node process holds an EmulatorClient, the NetworkEmulator its ShapedTransport submits to:
// a message's payload stays in the node; only its size crosses to the server, and the node hands
// the message to its own transport when the server releases it. So every node's traffic shares
// one star model, with the receivers' downlinks shared across senders as in the simulator.
//
// Protocol: an AF_UNIX SOCK_SEQPACKET socket at a filesystem path (reachable from every network
// namespace of the machine), one record per packet, four int64 words {kind, a, b, c}:
//   node -> server  kHello   {rank}               the first record, once
//                   kSend    {token, dst, bytes}  a message sent now; tokens increase per node
//   server -> node  kRelease {token}              the model delivered it: hand it over now
// The server checks every record: a node that breaks the protocol is disconnected and named in
// error(); the node then fails with rv::PeerError (as when the server goes away).
//
// Threading: the server serves on a thread of its own; the client reads releases on a thread of
// its own and calls its transports' send() from there (GlooTransport allows one such thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu/emulated_network.h"

namespace rv {

// Set by `ravnest real` in its children's environment (internal): the server's socket path.
constexpr const char* kEmulatorSocketEnv = "RAVNEST_EMULATOR_SOCKET";

class EmulatorServer {
 public:
  // Listens at `path` (created; removed by the destructor) for the nodes of `links`; `clock`
  // outlives the server. Throws rv::Error if the socket cannot be made.
  EmulatorServer(const std::string& path, std::vector<NodeLinks> links, const Clock& clock);
  ~EmulatorServer();
  EmulatorServer(const EmulatorServer&) = delete;
  EmulatorServer& operator=(const EmulatorServer&) = delete;

  // Serves connections on a thread of its own; with `run_clock`, also delivers on time
  // (EmulatedNetwork::start). Tests pass false and pump() the network after moving their clock.
  void start(bool run_clock = true);
  EmulatedNetwork& network() { return net_; }
  // The first protocol error a node made ("" if none).
  std::string error() const;
  const std::string& path() const { return path_; }

 private:
  struct Conn;
  void serve();
  void handle(const std::shared_ptr<Conn>& c);
  void drop(const std::shared_ptr<Conn>& c, const std::string& why);

  std::string path_;
  int nodes_;
  EmulatedNetwork net_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: the destructor wakes the serving thread
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;  // guarded by mu_
  std::vector<bool> joined_;                  // per rank, guarded by mu_
  std::string error_;                         // guarded by mu_
  std::thread thread_;
};

class EmulatorClient : public NetworkEmulator {
 public:
  // Connects to the server at `path` as node `rank`; rv::PeerError if it cannot.
  EmulatorClient(const std::string& path, int rank);
  ~EmulatorClient() override;  // disconnects; messages not yet released are dropped
  EmulatorClient(const EmulatorClient&) = delete;
  EmulatorClient& operator=(const EmulatorClient&) = delete;

  // NetworkEmulator. `src` must be this client's rank. Throws rv::PeerError once the server has
  // gone or refused a record, and the first error an inner send raised.
  void submit(Transport& inner, int src, int dst, Message msg) override;
  void drain(int src) override;

 private:
  struct Held {
    Transport* inner;
    int dst;
    Message msg;
  };
  void read_releases();
  void fail(std::exception_ptr e);

  int rank_;
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<int64_t, Held> held_;  // by token, guarded by mu_
  int64_t handing_ = 0;           // released, being handed over; guarded by mu_
  int64_t next_token_ = 0;        // guarded by mu_
  std::exception_ptr error_;      // guarded by mu_
  std::mutex write_mu_;           // one record at a time on the socket
  std::thread reader_;
};

}  // namespace rv
