// The network emulator shared by the node processes of one machine. The launcher (`ravnest real`)
// runs an EmulatorServer: one EmulatedNetwork for every node of the run, on the launcher's clock.
// Each node process holds an EmulatorClient, the NetworkEmulator its ShapedTransport goes through.
// A message travels at once over the node's own transport; only its size goes to the server, and
// the receiver holds the message until the server says the model has delivered it. So every node's
// traffic shares one star model (a receiver's downlink is shared across its senders, as in the
// simulator), and the machine's own copy of a large message overlaps the emulated transfer rather
// than adding to it.
//
// Delivery is matched by order: the model delivers a pair's messages in send order and the
// transport carries them in send order, so the k-th delivery from s to d is the k-th message s
// sent d through the emulator.
//
// Protocol: an AF_UNIX SOCK_SEQPACKET socket at a filesystem path (reachable from every network
// namespace of the machine), one record per packet, four int64 words {kind, a, b, c}:
//   node -> server  kHello   {rank}               the first record, once
//                   kSend    {token, dst, bytes}  a message sent now; tokens increase per node
//   server -> node  kDeliver {src}                the model delivered src's next message to you
// The server checks every record: a node that breaks the protocol is disconnected and named in
// error(); the node then fails with rv::PeerError (as when the server goes away).
//
// Threading: the server serves on a thread of its own; the client reads deliveries on a thread of
// its own. A client's submit/drain/recv/try_recv are called from its node's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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
  EmulatorServer(const std::string& path, NetworkLinks links, const Clock& clock);
  ~EmulatorServer();
  EmulatorServer(const EmulatorServer&) = delete;
  EmulatorServer& operator=(const EmulatorServer&) = delete;

  // Serves connections on a thread of its own; with `run_clock`, also delivers on time
  // (EmulatedNetwork::start). Tests pass false and pump() the network after moving their clock.
  void start(bool run_clock = true);
  EmulatedNetwork& network() { return *net_; }
  // The first protocol error a node made ("" if none).
  std::string error() const;
  const std::string& path() const { return path_; }

 private:
  struct Conn;
  void serve();
  void handle(const std::shared_ptr<Conn>& c);
  void drop(const std::shared_ptr<Conn>& c, const std::string& why);
  void deliver(int dst, int src);  // tells dst (now, or when it joins) that src's next is through

  std::string path_;
  int nodes_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: the destructor wakes the serving thread
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;    // guarded by mu_
  std::vector<std::shared_ptr<Conn>> by_rank_;  // joined nodes, guarded by mu_
  std::vector<std::vector<int64_t>> backlog_;   // deliveries before a join, guarded by mu_
  std::vector<bool> joined_;                    // per rank, ever; guarded by mu_
  std::string error_;                           // guarded by mu_
  std::thread thread_;
  std::unique_ptr<EmulatedNetwork> net_;  // last: stopped first, before what its deliveries use
};

class EmulatorClient : public NetworkEmulator {
 public:
  // Connects to the server at `path` as node `rank`; rv::PeerError if it cannot. A recv() that
  // sees no delivery for `timeout` seconds fails with rv::PeerError, as a transport's does; with
  // `tolerant` (real.on_peer_loss = "recover") it waits as its transport does, however long.
  // The executor's own messages (src < 0: churn notices) are never held.
  EmulatorClient(const std::string& path, int rank, Seconds timeout, bool tolerant = false);
  ~EmulatorClient() override;  // disconnects
  EmulatorClient(const EmulatorClient&) = delete;
  EmulatorClient& operator=(const EmulatorClient&) = delete;

  // NetworkEmulator. `src` is this client's rank and `inner` its transport. Throw rv::PeerError
  // once the server has gone or refused a record.
  void submit(Transport& inner, int src, int dst, Message msg) override;
  void drain(int src) override;
  Message recv(Transport& inner) override;
  std::optional<Message> try_recv(Transport& inner) override;
  void forget(int src) override;

 private:
  void read_deliveries();
  void fail(std::exception_ptr e);
  void take_arrived(Transport& inner);  // files what the transport has, by sender
  std::optional<Message> take_delivered();

  int rank_;
  Seconds timeout_;
  bool tolerant_;
  std::set<int> gone_;  // forgotten senders; guarded by mu_
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<int> delivered_;                   // senders, in delivery order; guarded by mu_
  std::exception_ptr error_;                    // guarded by mu_
  int64_t next_token_ = 0;                      // the node's thread only
  std::map<int, std::deque<Message>> arrived_;  // by sender, the node's thread only
  std::thread reader_;
};

}  // namespace rv
