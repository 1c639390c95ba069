#include "netref/pattern.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

namespace netref {

using nlohmann::json;

std::string Spec::kind_name() const {
  switch (kind) {
    case Kind::kPipeline:
      return "pipeline";
    case Kind::kRing:
      return "ring";
    case Kind::kRavnest:
      return "ravnest";
  }
  return "?";
}

namespace {

[[noreturn]] void bad(const std::string& key, const std::string& why) {
  throw InputError(key + ": " + why);
}

const json& need(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) bad(where + key, "missing");
  return j.at(key);
}

double number(const json& j, const std::string& key, double lo, double hi) {
  if (!j.is_number()) bad(key, "not a number");
  const double v = j.get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(key, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

int64_t integer(const json& j, const std::string& key, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) bad(key, "not an integer");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    bad(key, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

void only_keys(const json& j, const std::set<std::string>& keys, const std::string& where) {
  if (!j.is_object()) bad(where.empty() ? "(top)" : where, "not an object");
  for (const auto& [k, v] : j.items())
    if (!keys.count(k)) bad(where + k, "unknown key");
}

std::vector<std::vector<int>> groups(const json& j, const std::string& key, int nodes,
                                     size_t min_size, std::set<int>& used) {
  if (!j.is_array() || j.empty()) bad(key, "not a non-empty array of arrays of node indices");
  std::vector<std::vector<int>> out;
  for (size_t g = 0; g < j.size(); ++g) {
    const std::string k = key + "[" + std::to_string(g) + "]";
    if (!j[g].is_array() || j[g].size() < min_size)
      bad(k, "needs at least " + std::to_string(min_size) + " node indices");
    std::vector<int> members;
    for (size_t i = 0; i < j[g].size(); ++i) {
      const int n =
          static_cast<int>(integer(j[g][i], k + "[" + std::to_string(i) + "]", 0, nodes - 1));
      if (!used.insert(n).second) bad(k, "node " + std::to_string(n) + " is used twice");
      members.push_back(n);
    }
    out.push_back(members);
  }
  return out;
}

std::vector<double> seconds_per_stage(const json& j, const std::string& key, size_t k) {
  if (!j.is_array() || j.size() != k)
    bad(key, "needs one value per stage (" + std::to_string(k) + ")");
  std::vector<double> v;
  for (size_t i = 0; i < k; ++i)
    v.push_back(number(j[i], key + "[" + std::to_string(i) + "]", 0, 1e6));
  return v;
}

constexpr double kMaxBytes = 1e15;

}  // namespace

Spec parse_spec(const json& j) {
  only_keys(j, {"nodes", "pattern", "comment"}, "");
  Spec s;
  const json& nodes = need(j, "nodes", "");
  if (!nodes.is_array() || nodes.size() < 2 || nodes.size() > 100000)
    bad("nodes", "needs an array of 2 to 100000 nodes");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string w = "nodes[" + std::to_string(i) + "].";
    only_keys(nodes[i], {"up_mbps", "down_mbps", "latency_ms"}, w);
    NodeSpec n;
    n.up_bps = number(need(nodes[i], "up_mbps", w), w + "up_mbps", 1e-3, 1e6) * 125000.0;
    n.down_bps = number(need(nodes[i], "down_mbps", w), w + "down_mbps", 1e-3, 1e6) * 125000.0;
    n.latency = number(need(nodes[i], "latency_ms", w), w + "latency_ms", 0, 1e5) * 1e-3;
    s.nodes.push_back(n);
  }
  const int n = static_cast<int>(s.nodes.size());
  const json& p = need(j, "pattern", "");
  const std::string kind =
      need(p, "kind", "pattern.").is_string() ? p["kind"].get<std::string>() : "";
  std::set<int> used;
  if (kind == "ring") {
    s.kind = Kind::kRing;
    only_keys(p, {"kind", "rings", "bytes", "rounds"}, "pattern.");
    s.rings = groups(need(p, "rings", "pattern."), "pattern.rings", n, 2, used);
    s.ring_bytes =
        static_cast<uint64_t>(integer(need(p, "bytes", "pattern."), "pattern.bytes", 1, kMaxBytes));
    s.rounds = p.contains("rounds") ? integer(p["rounds"], "pattern.rounds", 1, 1000000) : 1;
    for (const auto& r : s.rings)
      if (s.ring_bytes < r.size()) bad("pattern.bytes", "smaller than a ring's member count");
    return s;
  }
  if (kind != "pipeline" && kind != "ravnest")
    bad("pattern.kind", "not one of pipeline, ring, ravnest");
  s.kind = kind == "pipeline" ? Kind::kPipeline : Kind::kRavnest;
  std::set<std::string> keys = {"kind",          "clusters",         "fwd_s",
                                "bwd_s",         "activation_bytes", "gradient_bytes",
                                "micro_batches", "max_in_flight"};
  if (s.kind == Kind::kRavnest) keys.insert({"stage_bytes", "rounds"});
  only_keys(p, keys, "pattern.");
  s.clusters = groups(need(p, "clusters", "pattern."), "pattern.clusters", n, 2, used);
  const size_t k = s.clusters[0].size();
  for (size_t c = 0; c < s.clusters.size(); ++c)
    if (s.clusters[c].size() != k)
      bad("pattern.clusters[" + std::to_string(c) + "]",
          "every pipeline needs the same number of stages");
  s.fwd_s = seconds_per_stage(need(p, "fwd_s", "pattern."), "pattern.fwd_s", k);
  s.bwd_s = seconds_per_stage(need(p, "bwd_s", "pattern."), "pattern.bwd_s", k);
  s.activation_bytes = static_cast<uint64_t>(
      integer(need(p, "activation_bytes", "pattern."), "pattern.activation_bytes", 1, kMaxBytes));
  s.gradient_bytes = static_cast<uint64_t>(
      integer(need(p, "gradient_bytes", "pattern."), "pattern.gradient_bytes", 1, kMaxBytes));
  s.micro_batches =
      integer(need(p, "micro_batches", "pattern."), "pattern.micro_batches", 1, 100000000);
  s.max_in_flight = p.contains("max_in_flight")
                        ? integer(p["max_in_flight"], "pattern.max_in_flight", 1, 1000000)
                        : static_cast<int64_t>(k);
  if (s.kind == Kind::kRavnest) {
    if (s.clusters.size() < 2)
      bad("pattern.clusters", "ravnest needs at least 2 clusters to average");
    const json& sb = need(p, "stage_bytes", "pattern.");
    if (!sb.is_array() || sb.size() != k) bad("pattern.stage_bytes", "needs one value per stage");
    for (size_t i = 0; i < k; ++i) {
      s.stage_bytes.push_back(static_cast<uint64_t>(
          integer(sb[i], "pattern.stage_bytes[" + std::to_string(i) + "]", 1, kMaxBytes)));
      if (s.stage_bytes.back() < s.clusters.size())
        bad("pattern.stage_bytes", "smaller than the number of clusters");
    }
    s.rounds = p.contains("rounds") ? integer(p["rounds"], "pattern.rounds", 1, 1000000) : 1;
  }
  return s;
}

Spec load_spec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot be read");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
  try {
    return parse_spec(j);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
}

Runner::Runner(const Spec& spec, Net& net) : spec_(spec), net_(net) {
  if (spec.kind == Kind::kRing) {
    for (size_t r = 0; r < spec.rings.size(); ++r) {
      Ring ring;
      ring.bytes = spec.ring_bytes;
      for (size_t i = 0; i < spec.rings[r].size(); ++i) {
        RingMember m;
        m.node = spec.rings[r][i];
        m.ring = static_cast<int>(r);
        m.pos = static_cast<int>(i);
        ring.members.push_back(static_cast<int>(ring_members_.size()));
        ring_members_.push_back(m);
      }
      ring_defs_.push_back(ring);
    }
    members_ = static_cast<int64_t>(ring_members_.size());
    return;
  }
  k_ = static_cast<int>(spec.clusters[0].size());
  for (size_t c = 0; c < spec.clusters.size(); ++c)
    for (int s = 0; s < k_; ++s) {
      Stage st;
      st.node = spec.clusters[c][static_cast<size_t>(s)];
      st.cluster = static_cast<int>(c);
      st.stage = s;
      stages_.push_back(st);
    }
  if (spec.kind == Kind::kPipeline) {
    members_ = static_cast<int64_t>(spec.clusters.size());
    return;
  }
  // Ravnest: one ring per stage, over that stage's node in every cluster (cluster order).
  for (int s = 0; s < k_; ++s) {
    Ring ring;
    ring.bytes = spec.stage_bytes[static_cast<size_t>(s)];
    for (size_t c = 0; c < spec.clusters.size(); ++c) {
      const int idx = static_cast<int>(c) * k_ + s;
      RingMember m;
      m.node = stages_[static_cast<size_t>(idx)].node;
      m.stage = idx;
      m.ring = s;
      m.pos = static_cast<int>(c);
      stages_[static_cast<size_t>(idx)].ring = static_cast<int>(ring_members_.size());
      ring.members.push_back(static_cast<int>(ring_members_.size()));
      ring_members_.push_back(m);
    }
    ring_defs_.push_back(ring);
  }
  members_ = static_cast<int64_t>(stages_.size());
}

void Runner::start() {
  t0_ = net_.now();
  if (spec_.kind == Kind::kRing) {
    for (size_t m = 0; m < ring_members_.size(); ++m) {
      RingMember& rm = ring_members_[m];
      rm.allowed = ring_defs_[static_cast<size_t>(rm.ring)].steps();
      ring_progress(static_cast<int>(m));
    }
    return;
  }
  for (size_t c = 0; c < spec_.clusters.size(); ++c) try_work(static_cast<int>(c) * k_);
}

void Runner::send(int src, int dst, uint64_t bytes, Pending p) {
  const int64_t id = static_cast<int64_t>(msgs_.size());
  msgs_.push_back({src, dst, bytes, now(), -1});
  pending_.push_back(p);
  traffic_ += bytes;
  net_.send(src, dst, bytes, id);
}

void Runner::arrived(int64_t id) {
  MessageRecord& m = msgs_.at(static_cast<size_t>(id));
  if (m.arrived >= 0) throw std::logic_error("message " + std::to_string(id) + " arrived twice");
  m.arrived = now();
  const Pending p = pending_[static_cast<size_t>(id)];
  if (p.kind == 2) {
    ++ring_members_[static_cast<size_t>(p.target)].recv;
    ring_progress(p.target);
    return;
  }
  Stage& st = stages_[static_cast<size_t>(p.target)];
  (p.kind == 0 ? st.fwd_q : st.bwd_q).push_back(p.mb);
  try_work(p.target);
}

// A stage does one thing at a time, a waiting backward before a forward (algo/ravnest.cc). Stage
// 0 injects a new micro-batch while fewer than max_in_flight are unfinished; the last stage does
// forward, loss and backward at once.
void Runner::try_work(int s) {
  Stage& st = stages_[static_cast<size_t>(s)];
  if (st.busy || st.averaging) return;
  const size_t k = static_cast<size_t>(k_);
  const size_t stage = static_cast<size_t>(st.stage);
  if (st.bwd_head < st.bwd_q.size()) {
    const int64_t mb = st.bwd_q[st.bwd_head++];
    st.busy = true;
    net_.after(spec_.bwd_s[stage], [this, s, mb] {
      stages_[static_cast<size_t>(s)].busy = false;
      backward_done(s, mb);
      try_work(s);
    });
    return;
  }
  int64_t mb = -1;
  if (stage == 0) {
    const int64_t limit =
        spec_.kind == Kind::kPipeline
            ? spec_.micro_batches
            : std::min(st.periods_averaged + 1, spec_.rounds) * spec_.micro_batches;
    if (st.injected < limit && st.injected - st.completed < spec_.max_in_flight) mb = st.injected++;
  } else if (st.fwd_head < st.fwd_q.size()) {
    mb = st.fwd_q[st.fwd_head++];
  }
  if (mb < 0) return;
  st.busy = true;
  if (stage + 1 == k) {
    net_.after(spec_.fwd_s[stage] + spec_.bwd_s[stage], [this, s, mb] {
      stages_[static_cast<size_t>(s)].busy = false;
      backward_done(s, mb);
      try_work(s);
    });
    return;
  }
  net_.after(spec_.fwd_s[stage], [this, s, mb] {
    Stage& me = stages_[static_cast<size_t>(s)];
    me.busy = false;
    send(me.node, stages_[static_cast<size_t>(s + 1)].node, spec_.activation_bytes, {0, s + 1, mb});
    try_work(s);
  });
}

void Runner::backward_done(int s, int64_t mb) {
  Stage& st = stages_[static_cast<size_t>(s)];
  ++st.backwards;
  if (st.stage > 0) {
    send(st.node, stages_[static_cast<size_t>(s - 1)].node, spec_.gradient_bytes, {1, s - 1, mb});
  } else {
    ++st.completed;
    st.completions.push_back(now());
    if (spec_.kind == Kind::kPipeline && st.completed == spec_.micro_batches) member_finished();
  }
  if (spec_.kind == Kind::kRavnest &&
      st.backwards == (st.periods_averaged + 1) * spec_.micro_batches)
    enter_averaging(s);
}

void Runner::enter_averaging(int s) {
  Stage& st = stages_[static_cast<size_t>(s)];
  st.averaging = true;
  RingMember& rm = ring_members_[static_cast<size_t>(st.ring)];
  rm.allowed += ring_defs_[static_cast<size_t>(rm.ring)].steps();
  ring_progress(st.ring);
}

// Segment j of a ring of C members over P bytes: P / C bytes, one more for j < P mod C.
uint64_t Runner::segment_bytes(const Ring& r, int64_t step, int pos) const {
  const int64_t c = static_cast<int64_t>(r.members.size());
  const int64_t t = step % r.steps();
  // Reduce-scatter step t sends segment (pos - t); all-gather step t' sends (pos + 1 - t').
  const int64_t seg = t < c - 1 ? ((pos - t) % c + c) % c : ((pos + 1 - (t - (c - 1))) % c + c) % c;
  return r.bytes / static_cast<uint64_t>(c) + (static_cast<uint64_t>(seg) < r.bytes % c ? 1 : 0);
}

// A member sends step t once it has received step t - 1 from its predecessor (and may: its round
// has begun); a round is over for it once it has sent and received all 2(C - 1) steps.
void Runner::ring_progress(int m) {
  RingMember& rm = ring_members_[static_cast<size_t>(m)];
  const Ring& ring = ring_defs_[static_cast<size_t>(rm.ring)];
  const int64_t steps = ring.steps();
  const int c = static_cast<int>(ring.members.size());
  for (;;) {
    bool moved = false;
    while (rm.sent < rm.allowed && rm.sent <= rm.recv) {
      const int next = ring.members[static_cast<size_t>((rm.pos + 1) % c)];
      const uint64_t bytes = segment_bytes(ring, rm.sent, rm.pos);
      ++rm.sent;
      send(rm.node, ring_members_[static_cast<size_t>(next)].node, bytes, {2, next, 0});
      moved = true;
    }
    const int64_t end = (rm.rounds_done + 1) * steps;
    if (rm.rounds_done < spec_.rounds && rm.recv >= end && rm.sent >= end) {
      rm.round_end.push_back(now());
      ++rm.rounds_done;
      moved = true;
      if (spec_.kind == Kind::kRing) {
        if (rm.rounds_done == spec_.rounds)
          member_finished();
        else
          rm.allowed += steps;
      } else {
        Stage& st = stages_[static_cast<size_t>(rm.stage)];
        st.averaging = false;
        ++st.periods_averaged;
        if (st.periods_averaged == spec_.rounds) member_finished();
        try_work(rm.stage);
      }
    }
    if (!moved) return;
  }
}

int64_t Runner::undelivered() const {
  int64_t n = 0;
  for (const auto& m : msgs_) n += m.arrived < 0 ? 1 : 0;
  return n;
}

json Runner::result(bool summary) const {
  json out;
  out["pattern"] = spec_.kind_name();
  out["nodes"] = spec_.nodes.size();
  out["message_count"] = msgs_.size();
  out["traffic_bytes"] = traffic_;
  out["undelivered"] = undelivered();
  std::vector<double> rounds;  // each round's end
  if (spec_.kind == Kind::kPipeline) {
    // One round: the pipelines' M micro-batches. Steady rate per pipeline: (M - T) micro-batches
    // between the T-th and the M-th completion at stage 0 (after the first window has filled).
    double makespan = 0, rate = 0;
    json clusters = json::array();
    const int64_t m = spec_.micro_batches, t = std::min(spec_.max_in_flight, m - 1);
    bool steady = m > 1;
    for (size_t c = 0; c < spec_.clusters.size(); ++c) {
      const auto& comp = stages_[c * static_cast<size_t>(k_)].completions;
      json cj;
      if (!comp.empty()) makespan = std::max(makespan, comp.back());
      if (steady && static_cast<int64_t>(comp.size()) == m && t >= 1) {
        const double r = static_cast<double>(m - t) /
                         (comp[static_cast<size_t>(m - 1)] - comp[static_cast<size_t>(t - 1)]);
        cj["steady_rate"] = r;
        rate += r;
      } else {
        steady = false;
      }
      if (!summary) cj["completions_s"] = comp;
      clusters.push_back(cj);
    }
    out["clusters"] = clusters;
    rounds.push_back(makespan);
    if (steady) out["steady_rate"] = rate;
    out["steady_unit"] = "micro-batches/s, all pipelines, from the T-th to the M-th completion";
  } else {
    // A round ends when its last member has finished it.
    for (int64_t r = 0; r < spec_.rounds; ++r) {
      double end = 0;
      for (const auto& rm : ring_members_)
        if (static_cast<int64_t>(rm.round_end.size()) > r)
          end = std::max(end, rm.round_end[static_cast<size_t>(r)]);
      rounds.push_back(end);
    }
    const bool ravnest = spec_.kind == Kind::kRavnest;
    const double per_round =
        ravnest ? static_cast<double>(spec_.clusters.size() * spec_.micro_batches) : 1.0;
    // Steady: over the rounds after the first (the first alone when there is one).
    if (rounds.size() >= 2)
      out["steady_rate"] =
          per_round * static_cast<double>(rounds.size() - 1) / (rounds.back() - rounds.front());
    else if (!rounds.empty() && rounds[0] > 0)
      out["steady_rate"] = per_round / rounds[0];
    out["steady_unit"] = ravnest ? "micro-batches/s, all clusters, periods after the first"
                                 : "rounds/s, rounds after the first";
  }
  std::vector<double> times;
  for (size_t i = 0; i < rounds.size(); ++i) times.push_back(rounds[i] - (i ? rounds[i - 1] : 0.0));
  out["round_end_s"] = rounds;
  out["round_times_s"] = times;
  if (!summary) {
    json ms = json::array();
    for (const auto& m : msgs_) ms.push_back({m.src, m.dst, m.bytes, m.sent, m.arrived});
    out["messages"] = ms;
    out["messages_columns"] = {"src", "dst", "bytes", "sent_s", "arrived_s"};
  }
  return out;
}

std::string Args::option(const std::string& key, const std::string& fallback) const {
  for (const auto& [k, v] : options)
    if (k == key) return v;
  return fallback;
}

Args parse_args(int argc, char** argv, const std::vector<std::string>& known,
                const std::string& usage) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      std::cout << usage;
      std::exit(0);
    }
    if (s == "-o") {
      if (i + 1 >= argc) throw InputError("-o needs a file");
      a.output = argv[++i];
    } else if (s == "--summary") {
      a.summary = true;
    } else if (s.rfind("--", 0) == 0) {
      const std::string key = s.substr(2);
      if (std::find(known.begin(), known.end(), key) == known.end())
        throw InputError("unknown option " + s + "\n" + usage);
      if (i + 1 >= argc) throw InputError(s + " needs a value");
      a.options.emplace_back(key, argv[++i]);
    } else if (a.input.empty()) {
      a.input = s;
    } else {
      throw InputError("unexpected argument " + s + "\n" + usage);
    }
  }
  if (a.input.empty()) throw InputError("no pattern file given\n" + usage);
  return a;
}

void write_json(const json& j, const std::string& path) {
  if (path.empty() || path == "-") {
    std::cout << j.dump(1) << "\n";
    return;
  }
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << j.dump(1) << "\n";
}

int tool_main(int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace netref
