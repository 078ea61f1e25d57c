// How the cpu backward scales with threads, modelled from measured step times (this machine has
// 2 cores; the question is 16 to 128).
//
// Runs the chunked backward of the 27B shape (Hk 16, Hv 48, Sk = Sv = 128, B 1, the harness's
// perf case; T = 4096 by default) on one thread, --passes times, and keeps every item's fastest
// time: each group's whole backward in the group schedule (backward_group), and the split
// schedule's steps (chunk_drivers.h: the forward pass per unit, per segment each unit's step and
// the group's reduction with the next segment's grams). Then, for 1 .. 128 threads, replays the
// pool's schedule over those times (items in decreasing weight, each to the first free worker,
// as ThreadPool::run_weighted):
//   group:  the group schedule, Hk B = 16 items, each a group's backward_group
//   tail:   the group schedule with a tail (backward_tail_groups): the last `threads` groups'
//           forward passes per unit after the other groups, then their reverse walks
//   split:  rounds over Hv B = 48 units (forward pass, then per segment units then groups),
//           a barrier after each round
//   panels: the same rounds over the units' panels of value columns (96 at Sv = 128), with the
//           units' finishes (their panels' sums added, dg and dbeta) as a step between the
//           panels and the groups
//   chosen: what the backend runs at that thread count (backward_items, then the tail)
// and prints the makespan, the speedup over the group schedule on one thread, and the load
// balance: makespan over the mean work per thread (for the group schedule max over mean busy
// time; for rounds it also counts the waits at the barriers). Then runs the schedules for real on --threads
// workers, alternately, and prints their median wall times and workspace.
//
//   backward_scaling [--tokens=4096] [--passes=3] [--threads=2] [--repeat=5] [--key-heads=16]
//                    [--value-heads=48]
//
// The model ignores memory bandwidth (every thread is assumed to run a step as fast as one
// thread alone does) and the cost of a barrier (a few microseconds each, 2 per segment).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "case.h"
#include "core/validate.h"
#include "cpu/backward_schedule.h"
#include "cpu/chunk_plan.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn;
using namespace gdn::testkit;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Makespan of items (in the order the pool hands them out) on `threads` workers, each item to
// the worker free first; busy gets each worker's total.
double makespan(const std::vector<double> &items, int threads, std::vector<double> &busy) {
    busy.assign(threads, 0.0);
    for (double t : items) *std::min_element(busy.begin(), busy.end()) += t;
    return *std::max_element(busy.begin(), busy.end());
}

double sum(const std::vector<double> &v) {
    double t = 0;
    for (double x : v) t += x;
    return t;
}
double sum(const std::vector<std::vector<double>> &v) {
    double t = 0;
    for (const auto &r : v) t += sum(r);
    return t;
}

struct Measured {
    std::vector<double> group;                           // per group: backward_group (the group schedule)
    std::vector<double> walk;                            // per group: the reverse walk part of it
    std::vector<double> gram, checkpoints;               // per (group, chunk) of the first round; per (group, unit)
    std::vector<std::vector<double>> units, reduce;      // per round: per (group, unit); per (group, chunk), then the next grams
    // Split by panels: the forward pass per (group, unit, panel); per round the steps per (group,
    // unit, panel) and the finishes per (group, chunk, unit).
    std::vector<double> panel_checkpoints;
    std::vector<std::vector<double>> panels, finish;
    double total() const {  // of the split schedule's steps
        return sum(gram) + sum(checkpoints) + sum(units) + sum(reduce);
    }
    double panels_total() const { return sum(gram) + sum(panel_checkpoints) + sum(panels) + sum(finish) + sum(reduce); }
};

struct Setup {
    const BackwardArgs &a;
    std::vector<std::vector<int64_t>> plans;
    int64_t max_chunk, groups, units, panels;
    cpu::BackwardLayout layout;
    int64_t rounds = 0;  // of the split schedules
};

// Every group's backward_group once (on g_group), then every split step once, in order per group
// (on g, then on g_panels split by panels); all groups have the same layout here (GDA, one
// snapshot), so every group has the same rounds.
Measured measure(const Setup &s, cpu::GroupBackward &g_group, cpu::GroupBackward &g, cpu::GroupBackward &g_panels,
                 cpu::BackwardWork &w) {
    const BackwardArgs &a = s.a;
    const Dims &d = a.dims;
    Measured m;
    m.units.assign(s.rounds, {});
    m.reduce.assign(s.rounds, {});
    m.panels.assign(s.rounds, {});
    m.finish.assign(s.rounds, {});
    for (int64_t gi = 0; gi < s.groups; ++gi) {
        const int64_t bq = gi / d.Hk, kh = gi % d.Hk;
        const std::vector<int64_t> &ends = s.plans[gi];
        Clock::time_point t = Clock::now();
        cpu::backward_checkpoints(a, bq, kh, ends, {0, s.units}, cpu::all_panels(g_group), g_group, w);  // backward_group in its two parts
        const double forward_pass = seconds_since(t);
        t = Clock::now();
        cpu::backward_reverse_walk(a, bq, kh, ends, g_group, w);
        m.walk.push_back(seconds_since(t));
        m.group.push_back(forward_pass + m.walk.back());
        for (int64_t u = 0; u < s.units; ++u) {
            t = Clock::now();
            cpu::backward_checkpoints(a, bq, kh, ends, {u, u + 1}, cpu::all_panels(g), g, w);
            m.checkpoints.push_back(seconds_since(t));
            for (int64_t p = 0; p < s.panels; ++p) {
                t = Clock::now();
                cpu::backward_checkpoints(a, bq, kh, ends, {u, u + 1}, {p, p + 1}, g_panels, w);
                m.panel_checkpoints.push_back(seconds_since(t));
            }
        }
        for (int64_t j = 0; j < cpu::backward_round_chunks(a, ends, 0, g); ++j) {
            t = Clock::now();
            cpu::backward_gram(a, bq, kh, ends, 0, j, g, w);
            m.gram.push_back(seconds_since(t));
        }
        for (int64_t round = 0; round < s.rounds; ++round) {
            const int64_t chunks = cpu::backward_round_chunks(a, ends, round, g);
            for (int64_t u = 0; u < s.units; ++u) {
                t = Clock::now();
                cpu::backward_unit_round(a, bq, kh, ends, {u, u + 1}, cpu::all_panels(g), round, g, w);
                m.units[round].push_back(seconds_since(t));
            }
            // The same round split by panels (g_panels' grams are g's: the same inputs).
            g_panels.gram = g.gram;
            for (int64_t u = 0; u < s.units; ++u)
                for (int64_t p = 0; p < s.panels; ++p) {
                    t = Clock::now();
                    cpu::backward_unit_round(a, bq, kh, ends, {u, u + 1}, {p, p + 1}, round, g_panels, w);
                    m.panels[round].push_back(seconds_since(t));
                }
            for (int64_t j = 0; j < chunks; ++j)
                for (int64_t u = 0; u < s.units; ++u) {
                    t = Clock::now();
                    cpu::backward_finish_chunk(a, bq, kh, ends, u, round, j, g_panels, w);
                    m.finish[round].push_back(seconds_since(t));
                }
            for (int64_t j = 0; j < chunks; ++j) {
                t = Clock::now();
                cpu::backward_reduce_chunk(a, bq, kh, ends, round, j, g, w);
                m.reduce[round].push_back(seconds_since(t));
            }
            for (int64_t j = 0; j < cpu::backward_round_chunks(a, ends, round + 1, g); ++j) {
                t = Clock::now();
                cpu::backward_gram(a, bq, kh, ends, round + 1, j, g, w);
                m.reduce[round].push_back(seconds_since(t));
            }
        }
    }
    return m;
}

struct Modelled {
    double makespan, balance;
};


Modelled group_schedule(const Measured &m, int threads) {
    std::vector<double> busy;
    const double span = makespan(m.group, threads, busy);
    return {span, span / (sum(m.group) / threads)};
}

// The whole groups, then the tail's forward passes unit by unit (lighter: the pool hands them out
// after), a wait for all, then the tail's reverse walks.
Modelled tail_schedule(const Measured &m, int threads) {
    const int64_t groups = static_cast<int64_t>(m.group.size()), tail = cpu::backward_tail_groups(groups, threads);
    if (tail == 0) return group_schedule(m, threads);
    const int64_t head = groups - tail, units = static_cast<int64_t>(m.checkpoints.size()) / groups;
    std::vector<double> first(m.group.begin(), m.group.begin() + head), walks(m.walk.begin() + head, m.walk.end());
    first.insert(first.end(), m.checkpoints.begin() + head * units, m.checkpoints.end());
    std::vector<double> busy;
    const double span = makespan(first, threads, busy) + makespan(walks, threads, busy);
    return {span, span / ((sum(first) + sum(walks)) / threads)};
}

Modelled split_schedule(const Measured &m, int threads) {
    std::vector<double> busy;
    std::vector<double> first = m.checkpoints;  // one round: the forward pass and the last grams
    first.insert(first.end(), m.gram.begin(), m.gram.end());
    double span = makespan(first, threads, busy);
    for (size_t r = 0; r < m.units.size(); ++r) span += makespan(m.units[r], threads, busy) + makespan(m.reduce[r], threads, busy);
    return {span, span / (m.total() / threads)};
}

Modelled panel_schedule(const Measured &m, int threads) {
    std::vector<double> busy;
    std::vector<double> first = m.panel_checkpoints;
    first.insert(first.end(), m.gram.begin(), m.gram.end());
    double span = makespan(first, threads, busy);
    for (size_t r = 0; r < m.panels.size(); ++r)
        span += makespan(m.panels[r], threads, busy) + makespan(m.finish[r], threads, busy) +
                makespan(m.reduce[r], threads, busy);
    return {span, span / (m.panels_total() / threads)};
}

int flag(int argc, char **argv, const char *name, int fallback) {
    const size_t n = std::strlen(name);
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return std::atoi(argv[i] + n + 1);
    return fallback;
}

}  // namespace

int main(int argc, char **argv) {
    const int64_t tokens = flag(argc, argv, "--tokens", 4096);
    const int real_threads = flag(argc, argv, "--threads", 2), repeat = flag(argc, argv, "--repeat", 5);
    const int passes = std::max(1, flag(argc, argv, "--passes", 3));
    Case c;  // the harness's 27B backward case at T = 4096, at --tokens
    for (const Case &p : perf_cases())
        if (p.op == Op::Backward && p.model == "qwen3.5-27b" && p.shape.T == 4096 && p.cu_seqlens.empty() && !p.kda) {
            c = p;
            break;
        }
    c.shape.T = tokens;
    c.shape.Hk = flag(argc, argv, "--key-heads", int(c.shape.Hk));
    c.shape.Hv = flag(argc, argv, "--value-heads", int(c.shape.Hv));
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0)), outputs = make_outputs(c, GDN_TYPE_F32);
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor d_out = in.tensor("d_out"), d_states = in.tensor("d_states");
    const gdn_grads grads = grads_of(out);
    BackwardArgs a;
    if (Status st = validate_backward(&p, &d_out, &d_states, &grads, a); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message.c_str());
        return 1;
    }
    const Dims &d = a.dims;
    Setup s{a, {}, std::min<int64_t>(64, d.T), d.Bq * d.Hk, cpu::units_of(d), cpu::BackwardPanels::of(d.Sv).count, {}};
    s.plans.resize(s.groups);
    for (int64_t gi = 0; gi < s.groups; ++gi) {
        cpu::plan_chunks(cpu::GroupRef{a.g, &d, gi / d.Hk, gi % d.Hk}, s.max_chunk, s.plans[gi]);
        s.layout = cpu::BackwardLayout::widest(s.layout, cpu::backward_layout(d, s.plans[gi], s.max_chunk));
    }
    std::printf("case: %s\n", c.label().c_str());
    std::printf("groups (Hk B) %lld, units (Hv B) %lld, chunk %lld, segments %lld\n", (long long)s.groups,
                (long long)(s.groups * s.units), (long long)s.max_chunk, (long long)s.layout.segments);

    std::vector<cpu::BackwardWork> work(std::max(1, real_threads));
    for (auto &w : work) w.resize(d, s.max_chunk);
    std::vector<cpu::GroupBackward> states(s.groups);
    for (auto &g : states) g.resize(d, s.max_chunk, s.layout, cpu::BackwardItems::Units);
    s.rounds = cpu::backward_rounds(a, s.plans[0], states[0]);
    cpu::GroupBackward one_group, by_panels;
    one_group.resize(d, s.max_chunk, s.layout, cpu::BackwardItems::Groups);
    by_panels.resize(d, s.max_chunk, s.layout, cpu::BackwardItems::Panels);

    // Step times: each step's fastest of --passes passes (a step that another process delayed
    // would otherwise stand for a slow worker; the first pass also warms caches and pages).
    Measured m = measure(s, one_group, states[0], by_panels, work[0]);
    for (int pass = 1; pass < passes; ++pass) {
        const Measured again = measure(s, one_group, states[0], by_panels, work[0]);
        auto keep_min = [](std::vector<double> &best, const std::vector<double> &t) {
            for (size_t i = 0; i < best.size(); ++i) best[i] = std::min(best[i], t[i]);
        };
        keep_min(m.group, again.group);
        keep_min(m.walk, again.walk);
        keep_min(m.gram, again.gram);
        keep_min(m.checkpoints, again.checkpoints);
        keep_min(m.panel_checkpoints, again.panel_checkpoints);
        for (size_t r = 0; r < m.units.size(); ++r) {
            keep_min(m.units[r], again.units[r]);
            keep_min(m.reduce[r], again.reduce[r]);
            keep_min(m.panels[r], again.panels[r]);
            keep_min(m.finish[r], again.finish[r]);
        }
    }
    double units_total = 0, reduce_total = 0, cp_total = 0, gram_total = 0;
    for (double x : m.gram) gram_total += x;
    for (double x : m.checkpoints) cp_total += x;
    for (size_t r = 0; r < m.units.size(); ++r) {
        for (double x : m.units[r]) units_total += x;
        for (double x : m.reduce[r]) reduce_total += x;
    }
    std::printf("one thread, group schedule: %.1f ms (backward_group of every group)\n", 1e3 * sum(m.group));
    std::printf("one thread, split steps: %.1f ms = forward pass %.1f + round 0's grams %.1f + unit steps %.1f + reductions "
                "(and the next grams) %.1f\n",
                1e3 * m.total(), 1e3 * cp_total, 1e3 * gram_total, 1e3 * units_total, 1e3 * reduce_total);
    std::printf("per unit and round %.3f ms, per group and round reductions %.3f ms (means, %lld rounds)\n",
                1e3 * units_total / (s.rounds * s.groups * s.units), 1e3 * reduce_total / (s.rounds * s.groups),
                (long long)s.rounds);
    std::printf("split by %lld panels: forward pass %.1f ms, panel steps %.1f, finishes %.1f (all steps %.1f ms, "
                "%.3f of the split's)\n\n",
                (long long)s.panels, 1e3 * sum(m.panel_checkpoints), 1e3 * sum(m.panels),
                1e3 * sum(m.finish), 1e3 * m.panels_total(), m.panels_total() / m.total());

    const double one = sum(m.group);  // speedups are over the group schedule on one thread
    std::printf("| threads | group: ms | speedup | balance | tail: ms | speedup | balance | split: ms | speedup | balance "
                "| panels: ms | speedup | balance | backend runs | speedup |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for (int threads : {1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 96, 128, 144, 192}) {
        const Modelled g = group_schedule(m, threads), tl = tail_schedule(m, threads), sp = split_schedule(m, threads);
        const Modelled pn = panel_schedule(m, threads);
        const cpu::BackwardItems items = cpu::backward_items(s.groups, s.units, s.panels, threads);
        const bool tail = items == cpu::BackwardItems::Groups && cpu::backward_tail_groups(s.groups, threads) > 0;
        const double chosen = items == cpu::BackwardItems::Panels  ? pn.makespan
                              : items == cpu::BackwardItems::Units ? sp.makespan
                                                                   : tl.makespan;
        const char *name = items == cpu::BackwardItems::Panels  ? "panels"
                           : items == cpu::BackwardItems::Units ? "split"
                           : tail                               ? "tail"
                                                                : "group";
        std::printf("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %s | %.2f |\n",
                    threads, 1e3 * g.makespan, one / g.makespan, g.balance, 1e3 * tl.makespan, one / tl.makespan,
                    tl.balance, 1e3 * sp.makespan, one / sp.makespan, sp.balance, 1e3 * pn.makespan, one / pn.makespan,
                    pn.balance, name, one / chosen);
    }

    // The schedules for real, alternately (the tail where --threads do not divide the groups).
    cpu::ThreadPool pool(real_threads);
    const int64_t tail = cpu::backward_tail_groups(s.groups, real_threads);
    std::vector<cpu::GroupBackward> per_worker(real_threads + tail);
    for (auto &g : per_worker) g.resize(d, s.max_chunk, s.layout, cpu::BackwardItems::Groups);
    const cpu::GroupPlans plans = [&](int64_t gi) -> const std::vector<int64_t> & { return s.plans[gi]; };
    std::vector<cpu::GroupBackward> panel_states(s.panels > 1 ? s.groups : 0);
    for (auto &g : panel_states) g.resize(d, s.max_chunk, s.layout, cpu::BackwardItems::Panels);
    std::vector<double> group_ms, tail_ms, split_ms, panel_ms;
    for (int r = 0; r < repeat; ++r) {
        Clock::time_point t = Clock::now();
        pool.run_weighted(std::vector<int64_t>(s.groups, d.T), [&](int64_t gi, int worker) {
            cpu::backward_group(a, gi / d.Hk, gi % d.Hk, s.plans[gi], per_worker[worker], work[worker]);
        });
        group_ms.push_back(1e3 * seconds_since(t));
        t = Clock::now();
        if (tail > 0) {
            cpu::backward_with_tail(pool, a, plans, tail, per_worker, work);
            tail_ms.push_back(1e3 * seconds_since(t));
        }
        t = Clock::now();
        cpu::backward_in_rounds(pool, a, plans, cpu::BackwardItems::Units, states, work);
        split_ms.push_back(1e3 * seconds_since(t));
        if (s.panels > 1) {
            t = Clock::now();
            cpu::backward_in_rounds(pool, a, plans, cpu::BackwardItems::Panels, panel_states, work);
            panel_ms.push_back(1e3 * seconds_since(t));
        }
    }
    std::sort(group_ms.begin(), group_ms.end());
    std::sort(panel_ms.begin(), panel_ms.end());
    std::sort(tail_ms.begin(), tail_ms.end());  // empty without a tail
    std::sort(split_ms.begin(), split_ms.end());
    uint64_t work_bytes = 0, group_bytes = one_group.bytes(), split_bytes = states.front().bytes();
    for (const auto &w : work) work_bytes += w.bytes();
    std::printf("\n%d threads, %d runs each, alternately: group schedule median %.1f ms (min %.1f), ", real_threads, repeat,
                group_ms[group_ms.size() / 2], group_ms.front());
    if (tail > 0)
        std::printf("with a tail of %lld groups %.1f ms (min %.1f), ", (long long)tail, tail_ms[tail_ms.size() / 2],
                    tail_ms.front());
    std::printf("split %.1f ms (min %.1f)", split_ms[split_ms.size() / 2], split_ms.front());
    if (!panel_ms.empty()) std::printf(", by panels %.1f ms (min %.1f)", panel_ms[panel_ms.size() / 2], panel_ms.front());
    std::printf("\n");
    const uint64_t panel_bytes = panel_states.empty() ? 0 : panel_states.front().bytes();
    std::printf("workspace: group schedule %.1f MiB per worker (%.1f; with the tail %.1f), split %.1f MiB per group "
                "(%.1f), by panels %.1f (%.1f), plus %.1f MiB of per-worker scratch\n",
                group_bytes / 1048576.0, real_threads * group_bytes / 1048576.0,
                (real_threads + tail) * group_bytes / 1048576.0, split_bytes / 1048576.0,
                s.groups * split_bytes / 1048576.0, panel_bytes / 1048576.0, s.groups * panel_bytes / 1048576.0,
                work_bytes / 1048576.0);
    return 0;
}
