#include "theory/bound.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace rv {
namespace {

void check(const BoundInputs& in, bool need_lr) {
  auto bad = [](const std::string& what) { throw InputError("convergence bound: " + what); };
  if (!(in.gap >= 0) || !std::isfinite(in.gap)) bad("F(w_0) - F* must be >= 0");
  if (!(in.smoothness > 0) || !std::isfinite(in.smoothness)) bad("L must be > 0");
  if (!(in.sigma2 >= 0) || !std::isfinite(in.sigma2)) bad("sigma^2 must be >= 0");
  if (!(in.dissimilarity >= 0) || !std::isfinite(in.dissimilarity)) bad("zeta^2 must be >= 0");
  if (in.batch < 1) bad("the micro-batch N must be >= 1");
  if (in.staleness < 0) bad("the staleness T must be >= 0");
  if (in.clusters < 1) bad("the clusters C must be >= 1");
  if (in.average_every < 1) bad("H, the updates between averagings, must be >= 1");
  if (in.updates < 1) bad("the updates K must be >= 1");
  if (need_lr && (!(in.lr > 0) || !std::isfinite(in.lr))) bad("the step size eta must be > 0");
}

// a and κ of docs/theory.md.
double a_of(const BoundInputs& in) { return in.clusters == 1 ? 1.0 : 2.0; }
double kappa_of(const BoundInputs& in) {
  return in.clusters == 1 ? 0.0 : static_cast<double>(in.average_every - 1);
}
// Theorem 2 applies: more than one cluster, and their objectives may differ.
bool second(const BoundInputs& in) { return !in.same_objective && in.clusters > 1; }

// ρ of Theorem 2 at step eta (0 under Theorem 1).
double rho_of(const BoundInputs& in, double eta) {
  if (!second(in)) return 0;
  const double T = static_cast<double>(in.staleness), kappa = kappa_of(in);
  const double le = in.smoothness * eta;
  return 2 * le * le * (a_of(in) * T * T + 4 * kappa * kappa);
}

// The condition's left side at step eta (docs/theory.md).
double condition_of(const BoundInputs& in, double eta) {
  const double T = static_cast<double>(in.staleness), kappa = kappa_of(in);
  const double le = in.smoothness * eta, a = a_of(in);
  if (!second(in)) return le + le * le * (a * T * T + 4 * kappa * kappa);
  const double rho = rho_of(in, eta);
  if (rho >= 1) return std::numeric_limits<double>::infinity();
  return le + a * le * le * T * T / (1 - rho);
}

}  // namespace

Bound convergence_bound(const BoundInputs& in) {
  check(in, true);
  const double L = in.smoothness, eta = in.lr, T = static_cast<double>(in.staleness);
  const double C = static_cast<double>(in.clusters), N = static_cast<double>(in.batch);
  const double K = static_cast<double>(in.updates), a = a_of(in), kappa = kappa_of(in);
  Bound b;
  b.theorem = second(in) ? 2 : 1;
  b.condition = condition_of(in, eta);
  b.holds = b.condition <= 1;
  b.paper_condition = 2 * eta * L * T * T / (C * N);
  b.optimisation = 2 * in.gap / (eta * K);
  b.noise = L * eta * in.sigma2 / (C * N);
  // Past ρ >= 1 Theorem 2 gives no bound: its delay terms are infinite.
  const double rho = rho_of(in, eta);
  const double scale = rho >= 1 ? std::numeric_limits<double>::infinity()
                                : L * L * eta * eta / (second(in) ? 1 - rho : 1.0);
  b.staleness = scale * a * T * T * in.sigma2 / N;
  b.drift = scale * 4 * kappa * in.sigma2 / N;
  b.dissimilarity = second(in) ? scale * (2 * a * T * T + 8 * kappa * kappa) * in.dissimilarity : 0;
  b.value = b.optimisation + b.noise + b.staleness + b.drift + b.dissimilarity;
  return b;
}

double largest_lr(const BoundInputs& in) {
  check(in, false);
  if (!second(in)) {
    // L eta + q (L eta)² = 1 with q = a T² + 4 κ²: L eta = (sqrt(1 + 4 q) - 1) / (2 q), or 1 for
    // q = 0.
    const double T = static_cast<double>(in.staleness), kappa = kappa_of(in);
    const double q = a_of(in) * T * T + 4 * kappa * kappa;
    const double x = q == 0 ? 1.0 : 2.0 / (1.0 + std::sqrt(1.0 + 4.0 * q));  // the same, stably
    return x / in.smoothness;
  }
  // The left side grows with eta; at 1 / L it is at least 1.
  double lo = 0, hi = 1 / in.smoothness;
  while (hi - lo > 1e-12 * hi) {
    const double mid = (lo + hi) / 2;
    (condition_of(in, mid) <= 1 ? lo : hi) = mid;
  }
  return lo;
}

double best_lr(BoundInputs in) {
  check(in, false);
  const double cap = largest_lr(in);
  if (in.sigma2 == 0 || in.gap == 0) return cap;
  const double eta =
      std::sqrt(2 * in.gap * static_cast<double>(in.clusters) * static_cast<double>(in.batch) /
                (in.smoothness * in.sigma2 * static_cast<double>(in.updates)));
  return std::min(eta, cap);
}

int64_t linear_speedup_staleness(const BoundInputs& in) {
  check(in, false);
  const double C = static_cast<double>(in.clusters);
  const double room =
      in.gap == 0 ? INFINITY
                  : std::sqrt(2 * in.sigma2 * static_cast<double>(in.updates) /
                              (in.smoothness * in.gap * C * C * C * static_cast<double>(in.batch)));
  const double left = room - 4 * kappa_of(in);
  if (left < 0) return -1;
  if (!std::isfinite(left)) return INT64_MAX;
  return static_cast<int64_t>(std::floor(std::sqrt(left / a_of(in))));
}

}  // namespace rv
