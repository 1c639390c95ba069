#include "algo/averager.h"

#include "algo/collective_averager.h"
#include "algo/ring_averager.h"
#include "core/error.h"
#include "core/fault_injection.h"

namespace rv {

void Averager::wait(const std::function<Message()>& recv,
                    const std::function<void(Message)>& other) {
  while (!progress()) {
    Message m = recv();
    if (!hold(m)) other(std::move(m));
  }
}

at::Tensor Averager::average(at::Tensor state, int64_t rows, int64_t round,
                             const std::function<Message()>& recv,
                             const std::function<void(Message)>& other) {
  if (!participates()) return state;
  struct Blocking {
    bool& flag;
    ~Blocking() { flag = false; }
  } blocking{blocking_};
  blocking_ = true;
  // A negative control (core/fault_injection.h): the averaging runs, and its mean is dropped.
  const at::Tensor own =
      injected_fault().allreduce_own && state.defined() ? state.clone() : at::Tensor();
  start(std::move(state), rows, round);
  wait(recv, other);
  at::Tensor mean = result();  // undefined in timing mode, as the state given there
  clear();
  return own.defined() ? own : mean;
}

void Averager::reconfigure(const NodeRole&, const Assignment&, const std::vector<int>&) {
  throw InputError(
      "churn needs training.allreduce = \"multi-ring\": this averager cannot re-form its rings");
}

void Averager::drop(int) {
  throw InputError(
      "churn needs training.allreduce = \"multi-ring\": this averager cannot give up a ring");
}

at::Tensor Averager::take_over(at::Tensor state) {
  const bool alone = holds_alone(state) && state.is_contiguous();
  at::Tensor rows = state.dim() == 1 ? state.unsqueeze(0) : state;
  return alone ? rows : rows.clone();
}

Event Averager::event_now(NodeEnv& env, const NodeRole& role, EventKind kind) {
  Event e;
  e.kind = kind;
  e.node = role.node;
  e.cluster = role.cluster;
  e.stage = role.stage;
  e.micro_batch = -1;
  e.start = e.end = env.clock.now();
  return e;
}

std::unique_ptr<Averager> make_averager(NodeEnv& env, const Plan& plan, const ModelDesc& model,
                                        int node, const Allreduce& kind, int64_t piece_bytes) {
  if (kind.executor_collectives)
    return std::make_unique<CollectiveAverager>(env, plan, model, node);
  switch (kind.topology) {
    case AllreduceTopology::kSingleRing:
      return std::make_unique<RingAverager>(env, plan, model, node, RingTopology::kSingle,
                                            piece_bytes);
    case AllreduceTopology::kMultiRing:
      break;
  }
  return std::make_unique<RingAverager>(env, plan, model, node, RingTopology::kMulti, piece_bytes);
}

}  // namespace rv
