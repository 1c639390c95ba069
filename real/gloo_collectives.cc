#include "real/gloo_collectives.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/error.h"

namespace rv {
namespace {

class GlooWork : public CollectiveWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> tensors, std::string what)
      : work_(std::move(work)), tensors_(std::move(tensors)), what_(std::move(what)) {}
  bool done() override {
    if (!work_->isCompleted()) return false;
    check();
    return true;
  }
  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      throw PeerError(what_ + " failed: " + e.what());
    }
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
};

std::string group_name(const std::vector<int>& ranks) {
  std::string s = "c10d allreduce over ranks";
  for (int r : ranks) s += " " + std::to_string(r);
  return s;
}

}  // namespace

GlooCollectives::GlooCollectives(GlooTransport& transport) : transport_(transport) {}
GlooCollectives::~GlooCollectives() = default;

void GlooCollectives::join(const std::vector<int>& ranks) {
  if (groups_.count(ranks)) return;
  groups_.emplace(ranks, transport_.make_group(ranks));
}

std::unique_ptr<CollectiveWork> GlooCollectives::allreduce_sum(const std::vector<int>& ranks, at::Tensor t) {
  auto it = groups_.find(ranks);
  RV_CHECK(it != groups_.end(), "allreduce_sum over a group not joined: " + group_name(ranks));
  RV_CHECK(t.is_contiguous() && t.scalar_type() == at::kFloat, "allreduce_sum needs a contiguous float32 tensor");
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  auto work = it->second->allreduce(tensors, opts);
  return std::make_unique<GlooWork>(std::move(work), std::move(tensors), group_name(ranks));
}

}  // namespace rv
