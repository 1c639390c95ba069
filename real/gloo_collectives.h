// GlooCollectives: NodeEnv's Collectives over c10d ProcessGroupGloo, for the "gloo" all-reduce
// baseline (training.allreduce). One process group per set of ranks, made on join() over the
// transport's rendezvous store; sums run asynchronously on Gloo's threads.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/env.h"
#include "real/gloo_transport.h"

namespace rv {

class GlooCollectives : public Collectives {
 public:
  explicit GlooCollectives(GlooTransport& transport);
  ~GlooCollectives() override;

  const char* name() const override { return "c10d allreduce (Gloo)"; }
  void join(const std::vector<int>& ranks) override;
  std::unique_ptr<CollectiveWork> allreduce_sum(const std::vector<int>& ranks,
                                                at::Tensor t) override;

 private:
  GlooTransport& transport_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupGloo>> groups_;
};

}  // namespace rv
