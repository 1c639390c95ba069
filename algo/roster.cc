#include "algo/roster.h"

#include <algorithm>

#include "core/error.h"

namespace rv {

Roster::Roster(const Plan& plan, int initial_nodes) : plan_(plan) {
  State& s = committed_;
  s.nodes.resize(plan.clusters.size());
  s.down.assign(plan.clusters.size(), 0);
  s.present.assign(static_cast<size_t>(plan.nodes), 0);
  std::vector<char> staged(static_cast<size_t>(plan.nodes), 0);
  for (size_t c = 0; c < plan.clusters.size(); ++c)
    for (const StagePlan& st : plan.clusters[c].stages) {
      s.nodes[c].push_back(st.node);
      staged.at(static_cast<size_t>(st.node)) = 1;
    }
  for (int r = 0; r < plan.nodes && r < initial_nodes; ++r) {
    s.present[static_cast<size_t>(r)] = 1;
    if (!staged[static_cast<size_t>(r)]) s.spares.push_back(r);
  }
  now_ = committed_;
}

bool Roster::State::whole(int cluster) const {
  const auto& st = nodes.at(static_cast<size_t>(cluster));
  return std::find(st.begin(), st.end(), -1) == st.end();
}

void Roster::State::apply(const MemberEvent& e, size_t index) {
  ++applied;
  RV_CHECK(e.node >= 0 && static_cast<size_t>(e.node) < present.size(),
           "membership: an event of node " + std::to_string(e.node) + ", outside the pool");
  const auto n = static_cast<size_t>(e.node);
  if (e.join) {
    if (present[n]) return;
    present[n] = 1;
    if (!waiting.empty()) {
      const auto [c, st] = waiting.front();
      waiting.erase(waiting.begin());
      nodes[static_cast<size_t>(c)][static_cast<size_t>(st)] = e.node;
      takeovers.push_back({e.node, c, st, -1, index});
    } else {
      spares.push_back(e.node);
    }
    return;
  }
  if (!present[n]) return;
  present[n] = 0;
  auto sp = std::find(spares.begin(), spares.end(), e.node);
  if (sp != spares.end()) {
    spares.erase(sp);
    return;
  }
  for (size_t c = 0; c < nodes.size(); ++c)
    for (size_t st = 0; st < nodes[c].size(); ++st) {
      if (nodes[c][st] != e.node) continue;
      down[c] = 1;
      if (!spares.empty()) {
        nodes[c][st] = spares.front();
        spares.erase(spares.begin());
        takeovers.push_back(
            {nodes[c][st], static_cast<int>(c), static_cast<int>(st), e.node, index});
      } else {
        nodes[c][st] = -1;
        waiting.emplace_back(static_cast<int>(c), static_cast<int>(st));
      }
      return;
    }
}

void Roster::update(const Membership& m) {
  // Events first, then seals: a round still unsealed after the events were read will count at
  // least those events, so applying them beyond the last seal is safe.
  const std::vector<MemberEvent> more = m.events(events_.size());
  events_.insert(events_.end(), more.begin(), more.end());
  for (;;) {
    const auto round = static_cast<int64_t>(views_.size());
    const int64_t count = m.sealed(round);
    if (count < 0) break;
    RV_CHECK(count >= static_cast<int64_t>(committed_.applied) &&
                 count <= static_cast<int64_t>(events_.size()),
             "membership: round " + std::to_string(round) + " counts events out of order");
    while (committed_.applied < static_cast<size_t>(count))
      committed_.apply(events_[committed_.applied], committed_.applied);
    std::vector<int> view;
    std::vector<char> rebuilt(committed_.nodes.size(), 0);
    for (size_t c = 0; c < committed_.nodes.size(); ++c) {
      if (!committed_.down[c])
        view.push_back(static_cast<int>(c));
      else if (committed_.whole(static_cast<int>(c)))
        rebuilt[c] = 1;
    }
    views_.push_back(std::move(view));
    counts_.push_back(static_cast<size_t>(count));
    at_seal_.push_back(committed_.nodes);
    for (size_t c = 0; c < rebuilt.size(); ++c)
      if (rebuilt[c]) committed_.down[c] = 0;  // trains again from the next round
    rebuilt_.push_back(std::move(rebuilt));
  }
  now_ = committed_;
  while (now_.applied < events_.size()) now_.apply(events_[now_.applied], now_.applied);
}

bool Roster::in_view(int cluster, int64_t round) const {
  const auto& v = views_.at(static_cast<size_t>(round));
  return std::binary_search(v.begin(), v.end(), cluster);
}

bool Roster::rebuilt_after(int cluster, int64_t round) const {
  return rebuilt_.at(static_cast<size_t>(round)).at(static_cast<size_t>(cluster)) != 0;
}

bool Roster::left_since(int node, int64_t round) const {
  for (size_t i = counts_.at(static_cast<size_t>(round)); i < events_.size(); ++i)
    if (events_[i].node == node && !events_[i].join) return true;
  return false;
}

int64_t Roster::round_counting(size_t event) const {
  const auto it = std::upper_bound(counts_.begin(), counts_.end(), event);
  return static_cast<int64_t>(it - counts_.begin());
}

bool Roster::any_up() const {
  return std::any_of(now_.down.begin(), now_.down.end(), [](char d) { return d == 0; });
}

NodeRole Roster::role_of(int node) const {
  NodeRole r;
  r.node = node;
  for (size_t c = 0; c < now_.nodes.size(); ++c) {
    const auto& st = now_.nodes[c];
    for (size_t s = 0; s < st.size(); ++s) {
      if (st[s] != node) continue;
      const StagePlan& sp = plan_.clusters[c].stages[s];
      r.cluster = static_cast<int>(c);
      r.stage = static_cast<int>(s);
      r.stages = static_cast<int>(st.size());
      r.prev = s > 0 ? st[s - 1] : -1;
      r.next = s + 1 < st.size() ? st[s + 1] : -1;
      r.layer_begin = sp.layer_begin;
      r.layer_end = sp.layer_end;
      return r;
    }
  }
  return r;
}

}  // namespace rv
