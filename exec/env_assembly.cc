#include "exec/env_assembly.h"

namespace rv {

void TeeMetrics::record(const Event& e) {
  own_.record(e);
  if (observer_ == nullptr) return;
  if (observer_mu_ == nullptr) {
    observer_->record(e);
    return;
  }
  std::lock_guard<std::mutex> lock(*observer_mu_);
  observer_->record(e);
}

NodeEnvStack::NodeEnvStack(const Scenario& s, int node, const EnvParts& base,
                           const FaultSpec* faults)
    : shaped_(base.network
                  ? std::optional<ShapedTransport>(std::in_place, base.transport, *base.network)
                  : std::nullopt),
      transport_(shaped_ ? static_cast<Transport&>(*shaped_) : base.transport, base.clock,
                 faults ? *faults : faults_for(s.faults, node)),
      metrics_(base.metrics, base.observer, base.observer_mu),
      env_{transport_,       base.clock,
           base.compute,     metrics_,
           base.collectives, base.membership,
           base.checkpoints, direct_allowed(s, base, faults) ? base.direct : nullptr} {}

bool NodeEnvStack::direct_allowed(const Scenario& s, const EnvParts& base,
                                  const FaultSpec* faults) {
  const bool override_injects = faults != nullptr && (faults->delay > 0 || faults->drop_every > 0 ||
                                                      faults->crash_after_sends >= 0);
  return direct_possible(s, base.network != nullptr) && !override_injects;
}

bool NodeEnvStack::direct_possible(const Scenario& s, bool shaped) {
  return !shaped && s.faults.node < 0;
}

}  // namespace rv
