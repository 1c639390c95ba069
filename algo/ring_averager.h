// Ring all-reduce averaging over the point-to-point transport, in two topologies.
//
// Multi-ring (Ravnest's parallel multi-ring all-reduce): the flat model state (each layer's
// parameters, then its buffers) is cut at every cluster's stage boundaries into chunks; chunk k has
// one ring, made of the node holding it in each cluster (Plan::rings). Each ring splits its chunk
// into C segments and runs a reduce-scatter then an all-gather, 2(C - 1) rounds; every ring runs at
// the same time, and a node that holds several chunks serves all its rings in each round.
//
// Single ring (the baseline): each cluster's first stage (its leader) collects the states of its
// cluster's other stages, the leaders run one ring over the whole model, and each leader hands its
// stages their slices of the mean. Every byte of the model crosses the leaders' links.
//
// After either, every cluster holds the exact mean (up to float rounding): the owner of each
// reduced segment divides it by C before the all-gather hands it on.
//
// Pieces (training.ring_piece_mb): a ring whose segments are larger than the piece size is cut
// into P lanes, each a ring of its own over 1/P of the chunk, that go their own pace: a piece's
// addition (or copy) overlaps the next pieces' transfers, as Gloo's and NCCL's rings pipeline
// their chunks. Without (0, Ravnest's reference): one lane per ring, each segment whole. Each
// lane (and so each ring) moves on as soon as its own message is here, not in step with this
// node's other rings.
//
// Direct exchanges (NodeEnv::direct, the real executor with no emulated network or faults): in a
// blocking averaging (average(), which waits in wait()) of one row without churn, a lane's segments
// go through the executor's direct channel instead of messages: each round posts its receive (into
// the state for the all-gather, into scratch for the reduce-scatter) before it sends, and the data
// moves once, with no header, receiving thread or inbox between. All-gather round t's receive is
// posted with reduce-scatter round t (the segment that round sends on comes back as the mean), so
// the previous member's send of the mean finds it waiting and goes at once (Gloo's transport sends
// only to a posted receive); the two phases go under tags of their own. Overlapped averagings
// (start(), then progress() between training steps) keep to messages: c10d's sends and receives
// complete only in a wait, which progress() may not do (the node would stop training), so the rings
// would stand still until the end. The lanes then go in one order on every node, round by round and
// lane by lane (by ring, then piece), as Gloo's own ring does: a node waits for the first lane of
// its round, and since what that lane waits for was sent by a node that went the same order, no
// node waits for one that waits for it. Every node of a run decides alike (the channel is there for
// all or none, and the rows and churn are the run's), and the bytes each exchange records are those
// of the message it replaces, so the simulation and the metrics of both ways agree.
//
// Memory: a state handed over (std::move) is averaged in its own memory, else in a copy. Slices go
// to the peers as they are (Message::payload_frozen), with no copy: a ring writes a slice again
// only after a message that follows from the peer having taken it (reduce-scatter round t sends
// segment i - t, which the all-gather overwrites in its round t, after a chain of messages that
// starts with the next node's round t), and the result is read-only.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "algo/averager.h"

namespace rv {

enum class RingTopology { kMulti, kSingle };

class RingAverager : public Averager {
 public:
  // `piece_bytes`: the largest segment a lane sends in one message (rows included); 0: no pieces.
  RingAverager(NodeEnv& env, const Plan& plan, const ModelDesc& model, int node,
               RingTopology topology, int64_t piece_bytes = 0);

  bool participates() const override { return takes_part_; }
  void start(at::Tensor state, int64_t rows, int64_t round) override;
  bool hold(Message& m) override;
  bool progress() override;
  bool active() const override { return phase_ != Phase::kIdle; }
  at::Tensor result() const override;
  void clear() override;
  void reconfigure(const NodeRole& role, const Assignment& nodes,
                   const std::vector<int>& view) override;
  void drop(int node) override;
  // As Averager::wait(), but a ring on the direct channel waits for its lanes' receives there.
  void wait(const std::function<Message()>& recv,
            const std::function<void(Message)>& other) override;

 private:
  struct MyRing {
    int id = 0;              // index in Plan::rings (multi), 0 (single)
    int64_t lo = 0, hi = 0;  // this node's slice of the ring's chunk, in the averaged tensor
    int member = 0;          // this node's position (its cluster) in the ring
    int prev = -1, next = -1;
    int members = 0;
    std::vector<int> nodes;       // every member (churn: a ring with one that left is given up)
    int64_t seg_lo(int i) const;  // segment i of C: [seg_lo(i), seg_lo(i + 1))
  };
  // A ring of the averaging in progress, or one of its pieces: [lo, hi) is the lane's part of the
  // chunk. `aux` names it in messages (the ring's id and the piece's index).
  struct Lane : MyRing {
    int64_t aux = 0;
    int t = 0;            // round within its phase
    bool gather = false;  // in the all-gather (else the reduce-scatter)
    bool done = false;
    bool sent = false;  // this round's segment is sent
    // All-gather rounds [offered_from(), offers) have their segment offered to the transport
    // (offer()): each from the reduce-scatter round that sends the same segment on.
    int offers = 0;
    int offered_from() const { return gather ? t : 0; }
    // Direct exchanges: this round's receive, the all-gather rounds' receives posted ahead (round
    // t's with reduce-scatter round t, which sends the same segment on), the sends so far, and the
    // place a reduce-scatter round receives into (a slice of scratch_).
    std::unique_ptr<CollectiveWork> rx;
    std::deque<std::unique_ptr<CollectiveWork>> gather_rx;
    std::vector<std::unique_ptr<CollectiveWork>> tx;
    at::Tensor scratch;
  };
  struct Member {  // single ring, on a leader: another stage of its cluster
    int node = -1;
    int64_t lo = 0, hi = 0;  // its slice of the whole model's state
  };
  enum class Phase { kIdle, kCollect, kRing, kDone };
  // Multi-ring: this node's rings among the clusters of `view`, the holder of ring r in cluster c
  // being holder(r, c).
  void form_rings(const std::vector<int>& view, const std::function<int(int, int)>& holder);
  void send(int dst, MsgKind kind, int64_t step, int64_t aux, int64_t lo, int64_t hi);
  void make_lanes();  // lanes_ (empty: start() resets them) from rings_, cut into pieces, all ready
  void send_lane(Lane& l);
  // The segment a lane sends, and the one it receives, in its round.
  static int send_seg(const Lane& l);
  static int recv_seg(const Lane& l);
  // The reduce-scatter's addition into segment [a, b) of what `received` gives ([rows, b - a]; it
  // is called only in numeric runs), charged as its work; the round's last divides by C in the same
  // pass.
  void add_segment(const Lane& l, int64_t a, int64_t b,
                   const std::function<at::Tensor()>& received);
  // The lane's next round; after its last, the reduce-scatter's mean or the lane's end.
  void next_round(Lane& l);
  // The all-gather: the segment a lane receives in round t, offered as the place its payload may
  // arrive (Transport::offer) as soon as nothing here reads or writes it before that payload
  // (offer(): once the reduce-scatter has sent it), and taken back if unused.
  MessageMatch gather_match(const Lane& l, int t) const;
  void offer(Lane& l, int t);
  void withdraw(Lane& l, int t);
  void withdraw(Lane& l);  // every offer of the lane still out
  bool collect();          // single ring: the leader has every stage's state, or a member its mean
  // After its reduce-scatter: the lane's reduced segment, divided by C (by the last addition: this
  // charges its work).
  void divide_reduced(const Lane& l);
  void finish();  // hands out the slices (single-ring leader), records the span
  // Direct exchanges: the lane's round posted (its receive, then its segment sent), and the
  // rounds done in the one order while their receives are here; true once every lane is done.
  void post_direct(Lane& l);
  bool progress_direct();
  int direct_rounds() const;                         // of every lane: 2 (C - 1)
  void note(EventKind kind, int peer, Bytes bytes);  // a send or receive event
  // The early message of this round with that key, taken out of early_ (and its receive recorded);
  // nothing if it is not here yet.
  std::optional<Message> take(MsgKind kind, int64_t aux, int64_t step);

  const Plan& plan_;
  const ModelDesc& model_;
  std::vector<std::vector<int>> ring_stage_;  // multi: per ring, per cluster, the stage holding it
  at::Tensor original_;  // churn: the state as it started, for the chunks of rings given up
  bool keep_original_ = false;
  NodeEnv& env_;
  int node_;
  NodeRole role_;
  RingTopology topology_;
  bool takes_part_ = false;
  int clusters_ = 0;
  int64_t piece_bytes_ = 0;
  std::vector<MyRing> rings_;
  std::vector<Lane> lanes_;  // of the averaging in progress (a lane given up stays, done)
  // Lanes that may move (a message for them came, or they advanced or began), in turn; so that
  // each message costs one lane's work, not a look at every lane (thousands, in pieces).
  std::deque<size_t> ready_;
  std::unordered_map<int64_t, size_t> lane_of_;  // a lane's aux -> its index in lanes_
  size_t lanes_left_ = 0;                        // lanes not done
  // Single ring: this cluster's leader (its first stage) and, on the leader, the other stages.
  int leader_ = -1;
  std::vector<Member> members_;
  int64_t own_ = 0;    // length of this node's stage state
  int64_t whole_ = 0;  // length of the whole model's state
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, Message> early_;  // (kind, aux, step, round)
  // The averaging in progress.
  Phase phase_ = Phase::kIdle;
  int64_t round_ = 0;
  int64_t rows_ = 1;
  at::Tensor state_;  // [rows, length]: the stage's (multi), the whole model's (single leader)
  bool was_1d_ = false;
  // Direct exchanges in this averaging (see above); where the one order stands (the round of every
  // lane, and the lane within it); the reduce-scatter's receiving memory, kept between averagings.
  bool direct_ = false;
  int direct_round_ = 0;
  size_t direct_lane_ = 0;
  at::Tensor scratch_;
  Event span_;
};

}  // namespace rv
