#include "sim/sim_checkpoint.h"

#include <algorithm>
#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "core/error.h"
#include "core/output/whole_file.h"

namespace sg4 = simgrid::s4u;

namespace rv {

SimCheckpoints::SimCheckpoints(SimCheckpointOptions options, std::vector<int> trainers,
                               EventLog& log, SimNetwork& network)
    : options_(std::move(options)),
      trainers_(std::move(trainers)),
      log_(log),
      network_(network),
      release_(trainers_.size()) {
  RV_CHECK(std::is_sorted(trainers_.begin(), trainers_.end()),
           "SimCheckpoints: trainers in node order");
  if (!options_.resume) return;
  const CheckpointInfo& c = *options_.resume;
  if (c.nodes != trainers_)
    throw InputError(c.folder + ": the checkpoint holds other nodes than the ones this run trains");
  LogState state = read_log(events_file(c.folder));
  log_.restore(std::move(state.events), std::move(state.totals));
  restored_.reserve(trainers_.size());
  for (int node : trainers_) restored_.push_back(read_node_state(c, node));
}

size_t SimCheckpoints::index_of(int node) const {
  const auto it = std::lower_bound(trainers_.begin(), trainers_.end(), node);
  RV_CHECK(it != trainers_.end() && *it == node,
           "checkpoint: node " + std::to_string(node) + " does not train");
  return static_cast<size_t>(it - trainers_.begin());
}

void SimCheckpoints::start(sg4::Host* host) {
  for (auto& s : release_) s = sg4::Semaphore::create(0);
  all_ = sg4::Semaphore::create(0);
  sg4::Actor::create("checkpoints", host, [this] {
    try {
      barrier();
    } catch (const simgrid::ForcefulKillException&) {
      throw;  // the engine tears actors down; never swallow this
    } catch (...) {
      error_ = std::current_exception();
      sg4::Actor::kill_all();
    }
  })->daemonize();
}

const NodeState* SimCheckpoints::resume(int node) {
  if (!options_.resume) return nullptr;
  const size_t i = index_of(node);
  release_[i]->acquire();  // the barrier releases every node at the checkpoint's instant
  return &restored_[i];
}

void SimCheckpoints::save(const NodeState& state) {
  const size_t i = index_of(state.node);
  RV_CHECK(done_ < 0 || done_ == state.done, "checkpoint: node " + std::to_string(state.node) +
                                                 " saves after " + std::to_string(state.done) +
                                                 " updates, others after " + std::to_string(done_));
  done_ = state.done;
  write_node_state(options_.dir, state);
  if (++arrived_ == trainers_.size()) all_->release();
  release_[i]->acquire();
  if (stop_)
    throw StoppedAtCheckpoint("stopped after checkpoint " + std::to_string(completed_) + " (" +
                              std::to_string(state.done) + " updates), as asked");
}

void SimCheckpoints::barrier() {
  if (options_.resume) {
    sg4::this_actor::sleep_for(options_.resume->time);  // from 0: exactly the checkpoint's instant
    for (auto& s : release_) s->release();
  }
  for (;;) {
    all_->acquire();
    network_.quiesce();
    write_whole_file(events_path(options_.dir, done_),
                     encode_log(LogState{log_.events(), log_.totals()}));
    CheckpointInfo info;
    info.done = done_;
    info.time = sg4::Engine::get_clock();
    info.nodes = trainers_;
    complete_checkpoint(options_.dir, info);
    arrived_ = 0;
    done_ = -1;
    if (++completed_ == options_.stop_after) stop_ = true;
    for (auto& s : release_) s->release();
  }
}

}  // namespace rv
