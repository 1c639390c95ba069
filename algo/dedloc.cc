// dedloc: collaborative data parallelism with a load-balanced butterfly all-reduce (algo/dedloc.h).
#include "algo/dedloc.h"

#include <ATen/ATen.h>
#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "algo/algorithm.h"
#include "algo/pipeline_worker.h"
#include "algo/registry.h"
#include "core/error.h"

namespace rv {

Shares dedloc_shares(const std::vector<double>& up, const std::vector<double>& down,
                     const std::vector<bool>& client_only) {
  const int n = static_cast<int>(up.size());
  RV_CHECK(n >= 1 && down.size() == up.size() && client_only.size() == up.size(),
           "dedloc_shares: one entry per peer");
  if (std::all_of(client_only.begin(), client_only.end(), [](bool c) { return c; }))
    throw InputError(
        "dedloc needs a peer that accepts connections to aggregate: every device is client_only");
  Shares out;
  out.share.assign(static_cast<size_t>(n), 0.0);
  std::vector<double> c(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) c[i] = std::min(up[i], down[i]);
  const double c_max = *std::max_element(c.begin(), c.end());
  RV_CHECK(c_max > 0, "dedloc_shares: bandwidths must be positive");
  if (n == 1) {
    out.share[0] = 1;
    return out;
  }
  // Columns: w_1 .. w_n, T (in units of 1 / c_max), M (max_i w_i / c_i, in units of 1 / c_max).
  // Rows: per peer (n - 2) w_i - c_i T <= -1 and w_i - c_i M <= 0; then sum w_i = 1.
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_cols(lp, n + 2);
  const int colT = n + 1, colM = n + 2;
  for (int i = 1; i <= n; ++i) {
    if (client_only[i - 1])
      glp_set_col_bnds(lp, i, GLP_FX, 0.0, 0.0);
    else
      glp_set_col_bnds(lp, i, GLP_DB, 0.0, 1.0);
  }
  glp_set_col_bnds(lp, colT, GLP_LO, 0.0, 0.0);
  glp_set_col_bnds(lp, colM, GLP_LO, 0.0, 0.0);
  glp_set_obj_coef(lp, colT, 1.0);
  glp_set_obj_coef(lp, colM, 1e-6);
  glp_add_rows(lp, 2 * n + 1);
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0.0};
  auto put = [&](int row, int col, double v) {
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(v);
  };
  for (int i = 1; i <= n; ++i) {
    const double ci = c[i - 1] / c_max;
    glp_set_row_bnds(lp, i, GLP_UP, 0.0, -1.0);
    if (n > 2) put(i, i, n - 2.0);
    put(i, colT, -ci);
    glp_set_row_bnds(lp, n + i, GLP_UP, 0.0, 0.0);
    put(n + i, i, 1.0);
    put(n + i, colM, -ci);
  }
  glp_set_row_bnds(lp, 2 * n + 1, GLP_FX, 1.0, 1.0);
  for (int i = 1; i <= n; ++i) put(2 * n + 1, i, 1.0);
  glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  const int ret = glp_simplex(lp, &parm);
  const int status = glp_get_status(lp);
  if (ret != 0 || status != GLP_OPT) {
    glp_delete_prob(lp);
    throw Error("dedloc: the load-balancing programme has no optimum (GLPK status " +
                std::to_string(status) + ")");
  }
  double sum = 0;
  for (int i = 1; i <= n; ++i) sum += out.share[i - 1] = std::max(0.0, glp_get_col_prim(lp, i));
  for (double& w : out.share) w /= sum;
  out.seconds_per_byte = glp_get_col_prim(lp, colT) / c_max;
  glp_delete_prob(lp);
  return out;
}

std::vector<int64_t> part_bounds(const std::vector<double>& share, int64_t n) {
  std::vector<int64_t> b{0};
  double cumulative = 0;
  for (size_t i = 0; i < share.size(); ++i) {
    cumulative += share[i];
    const int64_t end =
        i + 1 == share.size()
            ? n
            : std::min<int64_t>(n, std::llround(cumulative * static_cast<double>(n)));
    b.push_back(std::max(b.back(), end));
  }
  return b;
}

namespace {

// dedloc's own message kinds (core/env.h algorithm_kind).
constexpr MsgKind kProgress =
    algorithm_kind(0);                           // the sender's samples (aux) so far in step `step`
constexpr MsgKind kPart = algorithm_kind(1);     // the sender's slice of an aggregator's part
                                                 // (aux: its samples)
constexpr MsgKind kPartSum = algorithm_kind(2);  // an aggregator's summed part (aux: the
                                                 // collaboration's samples)

const KeySpec& target_batch_key() {
  static const KeySpec k = training_integer_key(
      "target_batch", 0, 0, int64_t{1} << 40,
      "dedloc: samples the collaboration accumulates per optimizer step (each peer at its own "
      "pace); 0: batch_size per peer");
  return k;
}

int64_t target_batch(const TrainingSpec& training) {
  return std::get<int64_t>(stored_value(training, target_batch_key()));
}

// One dedloc peer: the collaboration's steps (see algo/dedloc.h).
class Peer {
 public:
  Peer(NodeEnv& env, const RunSpec& spec, int node, const NodeRole& role)
      : env_(env),
        node_(node),
        tr_(spec.scenario->training),
        w_(env, spec, node, tr_, in_flight(algorithm_of(*spec.scenario), tr_, 1)) {
    index_.assign(static_cast<size_t>(spec.plan->nodes), -1);
    for (const auto& cluster : spec.plan->clusters) {
      index_[static_cast<size_t>(cluster.stages.at(0).node)] = static_cast<int>(peers_.size());
      peers_.push_back(cluster.stages.at(0).node);
    }
    me_ = role.cluster;
    std::vector<double> up, down;
    std::vector<bool> client;
    for (int p : peers_) {
      const DeviceGroup& d = spec.scenario->device_of(p);
      up.push_back(d.up_bytes_per_s());
      down.push_back(d.down_bytes_per_s());
      client.push_back(d.client_only);
    }
    target_ = target_samples(target_batch(tr_), w_.batch(), static_cast<int>(peers_.size()));
    bounds_ = part_bounds(dedloc_shares(up, down, client).share,
                          spec.model->state_offset(spec.model->layer_count()));
    reports_.resize(peers_.size());
    rates_.assign(peers_.size(), 0.0);
  }

  void run() {
    int64_t seen = 0;  // samples of every step so far, over the collaboration
    for (int64_t step = 0; step < tr_.steps; ++step) {
      const int64_t own = accumulate(step);
      int64_t total = 0;
      w_.reduce_gradients(
          [&](const at::Tensor& flat) { return all_reduce(step, own, flat, &total); });
      w_.update(mb_ - 1, 0);
      seen += total;
      const int64_t done = step + 1;
      if (me_ == 0 && tr_.eval_every > 0 && done % tr_.eval_every == 0 && done < tr_.steps)
        w_.inject_eval(done, seen);
    }
    if (me_ == 0) w_.inject_eval(tr_.steps, seen);
    w_.stop_next();
  }

 private:
  // Micro-batches until the collaboration has target_ samples for `step`, as far as this peer can
  // tell: its own, the others' last reports, and what each of them has done since at the rate its
  // reports show (as DeDLOC's peers estimate the collaboration's progress from the reported
  // throughput; a peer not heard from in this step yet has worked at that rate since this peer
  // began it, the steps beginning together at the end of an all-reduce), a peer that reported
  // its last micro-batch of the step counted as it said. Each
  // peer reports after every micro-batch (kProgress: aux its samples, scalar the time, id 1 for its
  // last). Returns this peer's samples.
  int64_t accumulate(int64_t step) {
    int64_t own = 0;
    const Seconds began = env_.clock.now();
    auto estimate = [&] {
      const Seconds now = env_.clock.now();
      double sum = static_cast<double>(own);
      for (size_t j = 0; j < peers_.size(); ++j) {
        const Report& r = reports_[j];
        if (static_cast<int>(j) == me_) continue;
        if (r.step != step)
          sum += rates_[j] * std::max(0.0, now - began);
        else
          sum += static_cast<double>(r.samples) +
                 (r.last ? 0.0 : rates_[j] * std::max(0.0, now - r.time));
      }
      return sum;
    };
    auto report = [&](bool last) {
      for (size_t j = 0; j < peers_.size(); ++j) {
        if (static_cast<int>(j) == me_) continue;
        Message m;
        m.kind = kProgress;
        m.step = step;
        m.aux = own;
        m.id = last ? 1 : 0;
        m.scalar = env_.clock.now();
        m.bytes = kHeaderBytes;
        w_.send(peers_[j], std::move(m));
      }
    };
    while (estimate() < static_cast<double>(target_)) {
      int64_t st = 0;
      w_.forward(mb_, nullptr);
      w_.last_backward(mb_, &st);
      ++mb_;
      own += w_.batch();
      while (auto m = w_.try_recv()) file(std::move(*m));
      if (estimate() < static_cast<double>(target_)) report(false);
    }
    report(true);
    return own;
  }

  // The butterfly all-reduce of `flat` (undefined in timing mode) times `own`: returns the sum
  // over the collaboration divided by its samples, which it stores in *total.
  at::Tensor all_reduce(int64_t step, int64_t own, const at::Tensor& flat, int64_t* total) {
    Event span;
    span.kind = EventKind::kAverage;
    span.node = node_;
    span.cluster = me_;
    span.stage = 0;
    span.step = step;
    span.start = env_.clock.now();
    const bool numeric = flat.defined();
    const at::Tensor mine = numeric ? flat * static_cast<double>(own) : at::Tensor();
    auto part_len = [&](size_t j) { return bounds_[j + 1] - bounds_[j]; };
    auto slice = [&](const at::Tensor& v, size_t j) {
      return v.narrow(0, bounds_[j], part_len(j));
    };
    const size_t n = peers_.size(), me = static_cast<size_t>(me_);
    Bytes sent = 0;
    auto send = [&](size_t j, MsgKind kind, const at::Tensor& part, int64_t aux, Bytes elems) {
      Message m;
      m.kind = kind;
      m.step = step;
      m.aux = aux;
      m.bytes = kHeaderBytes + elems * kFloatBytes;
      if (numeric) {
        m.payload = {part.contiguous()};
        m.payload_frozen = true;
      }
      sent += m.bytes;
      w_.send(peers_[j], std::move(m));
    };
    // Reduce-scatter: each aggregator's slice to it.
    for (size_t j = 0; j < n; ++j)
      if (j != me && part_len(j) > 0)
        send(j, kPart, numeric ? slice(mine, j) : at::Tensor(), own, part_len(j));
    at::Tensor result = numeric ? at::empty_like(flat) : at::Tensor();
    int64_t samples = -1;
    if (part_len(me) > 0) {
      at::Tensor sum = numeric ? slice(mine, me).clone() : at::Tensor();
      int64_t count = own;
      for (size_t k = 0; k < n; ++k) {
        if (k == me) continue;
        Message m = await(kPart, step, peers_[k]);
        if (numeric) sum.add_(checked(m, part_len(me)));
        count += m.aux;
      }
      for (size_t k = 0; k < n; ++k)
        if (k != me) send(k, kPartSum, sum, count, part_len(me));
      if (numeric) slice(result, me).copy_(sum);
      samples = count;
    }
    // All-gather: every other aggregator's sum.
    for (size_t j = 0; j < n; ++j) {
      if (j == me || part_len(j) == 0) continue;
      Message m = await(kPartSum, step, peers_[j]);
      if (numeric) slice(result, j).copy_(checked(m, part_len(j)));
      samples = m.aux;
    }
    if (samples <= 0)
      throw InputError("dedloc: the collaboration's step " + std::to_string(step) +
                       " counted no samples");
    *total = samples;
    span.end = env_.clock.now();
    span.bytes = sent;
    env_.metrics.record(span);
    return numeric ? result / static_cast<double>(samples) : at::Tensor();
  }

  // A part's payload, checked against the length it must have.
  at::Tensor checked(const Message& m, int64_t len) const {
    if (m.payload.size() != 1 || m.payload[0].numel() != len)
      throw InputError("dedloc: node " + std::to_string(m.src) +
                       " sent a part of the wrong length to node " + std::to_string(node_));
    return m.payload[0].reshape({-1});
  }

  // Files a message for later: progress by step, parts by (kind, step, sender).
  void file(Message m) {
    if (m.kind == kProgress) {
      const int j = m.src >= 0 && static_cast<size_t>(m.src) < index_.size()
                        ? index_[static_cast<size_t>(m.src)]
                        : -1;
      if (j < 0 || m.aux < 0)
        throw InputError("dedloc: a malformed progress report from node " + std::to_string(m.src));
      Report& r = reports_[static_cast<size_t>(j)];
      // The rate between two reports of one step (it carries over to the next steps).
      if (r.step == m.step && m.scalar > r.time && m.aux > r.samples)
        rates_[static_cast<size_t>(j)] =
            static_cast<double>(m.aux - r.samples) / (m.scalar - r.time);
      r = Report{m.step, m.aux, m.scalar, m.id == 1};
      return;
    }
    if (m.kind != kPart && m.kind != kPartSum)
      throw unexpected_message("node " + std::to_string(node_) + " (dedloc)", m);
    const auto key = std::make_tuple(static_cast<int>(m.kind), m.step, m.src);
    if (parts_.count(key) != 0)
      throw InputError("dedloc: node " + std::to_string(m.src) + " sent step " +
                       std::to_string(m.step) + "'s " + to_string(m.kind) + " twice");
    parts_.emplace(key, std::move(m));
  }

  Message await(MsgKind kind, int64_t step, int src) {
    const auto key = std::make_tuple(static_cast<int>(kind), step, src);
    for (;;) {
      auto it = parts_.find(key);
      if (it != parts_.end()) {
        Message m = std::move(it->second);
        parts_.erase(it);
        return m;
      }
      file(w_.recv());
    }
  }

  NodeEnv& env_;
  int node_;
  TrainingSpec tr_;
  PipelineWorker w_;
  std::vector<int> peers_;  // the collaboration's nodes, by cluster (each holds the whole model)
  std::vector<int> index_;  // per node of the plan: its index in peers_, or -1
  int me_ = 0;              // this node's index among them
  std::vector<int64_t> bounds_;
  int64_t target_ = 0;
  int64_t mb_ = 0;  // this peer's micro-batches so far (their ids)
  // Each peer's last progress report (reports come in order per peer), and its rate in samples/s.
  struct Report {
    int64_t step = -1;
    int64_t samples = 0;
    Seconds time = 0;
    bool last = false;
  };
  std::vector<Report> reports_;
  std::vector<double> rates_;
  std::map<std::tuple<int, int64_t, int>, Message> parts_;
};

}  // namespace

void run_dedloc(NodeEnv& env, const RunSpec& spec, int node) {
  const NodeRole role = spec.plan->role_of(node);
  if (role.stage < 0) return;
  if (!role.first() || !role.last())
    throw InputError("dedloc needs a plan in which every node holds the whole model");
  Peer(env, spec, node, role).run();
}

Algorithm dedloc_algorithm() {
  return {.name = "dedloc",
          .summary =
              "DeDLOC: every peer the whole model, accumulating at its own pace until the "
              "collaboration has target_batch samples, then a butterfly all-reduce in "
              "shares from a linear programme over the peers' bandwidths (client_only "
              "peers aggregate none)",
          .run = &run_dedloc,
          .traits = {.in_flight = InFlightRule::kOne,
                     .layout = Layout::kReplicas,
                     .exchange = Exchange::kGradients},
          .hooks = {.target_batch = &target_batch},
          .keys = {target_batch_key()},
          .paced_by_clock =
              "each peer accumulates gradients at its own pace until the "
              "collaboration reaches target_batch: how many micro-batches each peer "
              "adds to a step follows the clock"};
}

}  // namespace rv
