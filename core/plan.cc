#include "core/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rv {

NodeRole Plan::role_of(int node) const {
  NodeRole r;
  r.node = node;
  for (int c = 0; c < static_cast<int>(clusters.size()); ++c) {
    const auto& st = clusters[c].stages;
    for (int s = 0; s < static_cast<int>(st.size()); ++s) {
      if (st[s].node != node) continue;
      r.cluster = c;
      r.stage = s;
      r.stages = static_cast<int>(st.size());
      r.prev = s > 0 ? st[s - 1].node : -1;
      r.next = s + 1 < r.stages ? st[s + 1].node : -1;
      r.layer_begin = st[s].layer_begin;
      r.layer_end = st[s].layer_end;
      return r;
    }
  }
  return r;
}

Seconds Plan::evaluation_time(int64_t batches) const {
  return batches > 0
             ? evaluation_fill_time + static_cast<double>(batches - 1) * evaluation_batch_time
             : 0.0;
}

double Plan::rate_with_evaluations(double samples, int64_t evaluations, int64_t batches) const {
  if (throughput <= 0 || samples <= 0) return 0.0;
  return samples /
         (samples / throughput + static_cast<double>(evaluations) * evaluation_time(batches));
}

nlohmann::json to_json(const Plan& plan) {
  nlohmann::json j;
  j["method"] = plan.method;
  j["nodes"] = plan.nodes;
  j["predicted_samples_per_s"] = plan.throughput;
  j["predicted_averaging_s"] = plan.averaging_time;
  j["predicted_evaluation_batch_s"] = plan.evaluation_batch_time;
  j["predicted_evaluation_fill_s"] = plan.evaluation_fill_time;
  j["reason"] = plan.reason;
  j["approximations"] = plan.approximations;
  if (plan.search_evaluations > 0)
    j["search"] = {{"evaluations", plan.search_evaluations},
                   {"budget", plan.search_budget},
                   {"stopped_by_time_limit", plan.search_timed_out}};
  j["clusters"] = nlohmann::json::array();
  for (const auto& c : plan.clusters) {
    nlohmann::json cj;
    cj["predicted_period_s"] = c.period;
    cj["predicted_samples_per_s"] = c.throughput;
    cj["stages"] = nlohmann::json::array();
    for (const auto& s : c.stages) {
      cj["stages"].push_back({{"node", s.node},
                              {"layers", {s.layer_begin, s.layer_end}},
                              {"memory_bytes", s.memory},
                              {"predicted_time_s", s.predicted_time},
                              {"predicted_compute_s", s.predicted_compute}});
    }
    j["clusters"].push_back(cj);
  }
  j["rings"] = nlohmann::json::array();
  for (const auto& r : plan.rings)
    j["rings"].push_back({{"state", {r.begin, r.end}}, {"owners", r.owners}});
  return j;
}

Plan plan_from_json(const nlohmann::json& j) {
  try {
    Plan p;
    p.method = j.at("method").get<std::string>();
    p.nodes = j.at("nodes").get<int>();
    for (const auto& cj : j.at("clusters")) {
      ClusterPlan c;
      for (const auto& sj : cj.at("stages")) {
        StagePlan s;
        s.node = sj.at("node").get<int>();
        s.layer_begin = sj.at("layers").at(0).get<int>();
        s.layer_end = sj.at("layers").at(1).get<int>();
        s.memory = sj.value("memory_bytes", Bytes{0});
        s.predicted_time = sj.value("predicted_time_s", 0.0);
        s.predicted_compute = sj.value("predicted_compute_s", 0.0);
        if (s.node < 0 || s.node >= p.nodes || s.layer_begin >= s.layer_end)
          throw InputError("plan.json: bad stage");
        c.stages.push_back(s);
      }
      c.period = cj.value("predicted_period_s", 0.0);
      c.throughput = cj.value("predicted_samples_per_s", 0.0);
      p.clusters.push_back(c);
    }
    if (j.contains("rings"))
      for (const auto& rj : j.at("rings")) {
        Ring r;
        r.begin = rj.at("state").at(0).get<int64_t>();
        r.end = rj.at("state").at(1).get<int64_t>();
        r.owners = rj.at("owners").get<std::vector<int>>();
        p.rings.push_back(r);
      }
    p.throughput = j.value("predicted_samples_per_s", 0.0);
    p.averaging_time = j.value("predicted_averaging_s", 0.0);
    p.evaluation_batch_time = j.value("predicted_evaluation_batch_s", 0.0);
    p.evaluation_fill_time = j.value("predicted_evaluation_fill_s", 0.0);
    p.reason = j.value("reason", std::string());
    p.approximations = j.value("approximations", std::vector<std::string>());
    if (j.contains("search")) {
      const auto& sj = j.at("search");
      p.search_evaluations = sj.at("evaluations").get<int64_t>();
      p.search_budget = sj.at("budget").get<int64_t>();
      p.search_timed_out = sj.at("stopped_by_time_limit").get<bool>();
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("plan.json: ") + e.what());
  }
}

}  // namespace rv
