#include "real/gloo_collectives.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/error.h"
#include "real/gloo_work.h"

namespace rv {
namespace {

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

std::unique_ptr<CollectiveWork> GlooCollectives::allreduce_sum(const std::vector<int>& ranks,
                                                               at::Tensor t) {
  auto it = groups_.find(ranks);
  RV_CHECK(it != groups_.end(), "allreduce_sum over a group not joined: " + group_name(ranks));
  RV_CHECK(t.is_contiguous() && t.scalar_type() == at::kFloat,
           "allreduce_sum needs a contiguous float32 tensor");
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  auto work = it->second->allreduce(tensors, opts);
  return std::make_unique<GlooWork>(std::move(work), std::move(tensors), group_name(ranks));
}

}  // namespace rv
