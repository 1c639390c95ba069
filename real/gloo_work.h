// GlooWork: NodeEnv's CollectiveWork over a c10d work of ProcessGroupGloo (a collective, a send or
// a receive), for GlooCollectives and GlooTransport's direct channel.
//
// done() never blocks (a c10d send or receive reports done only once it was waited for: c10d
// completes those works in wait()); done() and wait() throw rv::PeerError naming `what` if the
// operation failed
// (wait() also if it did not end within the process group's timeout). The tensors the operation
// reads or writes are kept alive until the GlooWork goes. A GlooWork that goes before its
// operation ended (a failure elsewhere ended the run's part that waited for it) aborts it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace rv {

class GlooWork : public CollectiveWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> tensors, std::string what)
      : work_(std::move(work)), tensors_(std::move(tensors)), what_(std::move(what)) {}
  ~GlooWork() override {
    if (ended_) return;
    try {
      if (!work_->isCompleted()) work_->abort();
    } catch (...) {
    }
  }
  bool done() override {
    if (!work_->isCompleted()) return false;
    ended_ = true;
    check();
    return true;
  }
  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      ended_ = true;
      throw PeerError(what_ + " failed: " + e.what());
    }
    ended_ = true;
    check();
  }

 private:
  void check() {
    if (auto e = work_->exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        throw PeerError(what_ + " failed: " + ex.what());
      }
    }
  }
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> tensors_;  // kept alive until the work is done
  std::string what_;
  bool ended_ = false;
};

}  // namespace rv
