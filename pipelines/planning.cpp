#include "pipelines/planning.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/device/device.h"
#include "core/error.h"
#include "core/exec/ranks.h"
#include "core/plan/planner.h"
#include "core/plan/split.h"
#include "core/store/offload_prices.h"
#include "models/zoo.h"

namespace tessel::pipelines {

namespace {

nlohmann::json partition_json(const core::Partition& p) {
  return {{"rows", p.rows()}, {"cols", p.cols()}, {"y_edges", p.y_edges}, {"x_edges", p.x_edges}};
}

nlohmann::json partitions_json(const std::vector<core::Partition>& parts) {
  nlohmann::json j = nlohmann::json::array();
  for (const core::Partition& p : parts) j.push_back(partition_json(p));
  return j;
}

// How segment `s` runs (core::Scheme, by name) and the fields that belong to that scheme alone.
nlohmann::json scheme_json(const core::Graph& graph, const core::Segment& s) {
  nlohmann::json j = {{"name", core::to_string(s.scheme)}};
  if (const auto* rows = s.as<core::SharedRows>()) {
    j["keep_graph"] = rows->keep_graph;
    j["kept_bytes"] = rows->kept_bytes;
    j["kept_tier"] = core::to_string(rows->kept_tier);
  } else if (const auto* whole = s.as<core::WholeBarriers>()) {
    j["keep_graph"] = whole->keep_graph;
  } else if (const auto* sub = s.as<core::SubSegments>()) {
    nlohmann::json dropped = nlohmann::json::array();
    for (core::NodeId v : sub->dropped) dropped.push_back(graph.node(v).name);
    j["keep_inner"] = sub->keep_inner;
    j["inner_tier"] = core::to_string(sub->tier);
    j["dropped_inner"] = dropped;
    j["inner_blocks"] = partitions_json(sub->blocks);
    j["inner_grad_blocks"] = partitions_json(sub->grad_blocks);
  }
  return j;
}

std::string plan_json(const core::Plan& plan, const core::Graph& graph) {
  nlohmann::json j;
  j["strategy"] = core::to_string(plan.strategy);
  j["input"] = {plan.input.channels, plan.input.height, plan.input.width};
  j["budget_bytes"] = plan.budget_bytes;
  nlohmann::json segments = nlohmann::json::array();
  for (const core::Segment& s : plan.segments) {
    const core::Shape& out = plan.shapes[static_cast<size_t>(s.output)];
    nlohmann::json recomputed = nlohmann::json::array();
    for (core::NodeId v : s.dropped_inner()) recomputed.push_back(graph.node(v).name);
    segments.push_back({
        {"first_op", graph.node(s.input + 1).name},
        {"last_op", graph.node(s.output).name},
        {"ops", s.output - s.input},
        {"streaming_reduction", s.reduction >= 0 ? graph.node(s.reduction).name : ""},
        {"output", {out.channels, out.height, out.width}},
        {"forward", partition_json(s.forward)},
        {"backward", partition_json(s.backward)},
        {"keep_graph", s.keeps_graph()},
        {"barriers", core::barrier_mode(graph, s)},
        {"forward_working_bytes", s.forward_working_bytes},
        {"backward_working_bytes", s.backward_working_bytes},
        {"tier", s.reduction >= 0 ? "" : core::to_string(s.tier)},
        {"resident_bytes", s.tier == core::Tier::kResident ? 0 : s.resident_bytes},
        {"moved_bytes_per_step", s.moved_bytes},
        {"inner_moved_bytes_per_step", s.inner_moved_bytes},
        {"recomputed_inner_checkpoints", recomputed},
        {"scheme", scheme_json(graph, s)},
        {"halo_flops", s.halo_flops},
        {"blocks",
         s.tier == core::Tier::kResident ? nlohmann::json(nullptr) : partition_json(s.blocks)},
        {"resident_blocks", s.tier == core::Tier::kResident ? 0 : s.resident_blocks},
        {"input_grad_blocks", partition_json(s.input_grad_blocks)},
    });
  }
  if (plan.glass.any_background()) {
    for (size_t i = 0; i < plan.glass.segments.size() && i < segments.size(); ++i) {
      const core::GlassSummary::SegmentFlops& f = plan.glass.segments[i];
      segments[i]["glass"] = {{"dense_flops", f.dense},
                              {"glass_tile_flops", f.in_glass_tiles},
                              {"filled_flops", f.filled}};
    }
  }
  j["segments"] = segments;
  if (plan.glass.any_background()) {
    const core::GlassSummary& g = plan.glass;
    j["glass"] = {{"background_fraction", g.image_fraction},
                  {"flops_fraction", g.flops_fraction},
                  {"filled_fraction", g.filled_fraction},
                  {"margin", g.margin()},
                  {"forward_tiles", g.forward_tiles},
                  {"glass_forward_tiles", g.glass_forward_tiles},
                  {"backward_tiles", g.backward_tiles},
                  {"glass_backward_tiles", g.glass_backward_tiles},
                  {"checkpoint_bytes", g.checkpoint_bytes},
                  {"uniform_checkpoint_bytes", g.uniform_checkpoint_bytes}};
    for (const auto& [segment, why] : g.dense) {
      j["glass"]["computed_as_tissue"].push_back({{"segment", segment}, {"because", why}});
    }
    if (g.stopped_at >= 0) {
      j["glass"]["stopped_at_segment"] = g.stopped_at;
      j["glass"]["stopped_because"] = g.stopped_why;
    }
  }
  const core::MemoryBreakdown& m = plan.predicted;
  j["predicted_bytes"] = {{"parameters", m.parameters},
                          {"gradients", m.gradients},
                          {"optimizer", m.optimizer},
                          {"checkpoints", m.checkpoints},
                          {"working_set", m.working_set},
                          {"head", m.tail},
                          {"total", m.total()}};
  // Each pass at its peak (segment i's forward, then its backward), to set beside a measured
  // timeline (`tessel bench step --timeline`).
  nlohmann::json passes = nlohmann::json::array();
  for (size_t i = 0; i < plan.passes.size(); ++i) {
    const core::Segment& s = plan.segments.at(i / 2);
    passes.push_back({{"segment", i / 2},
                      {"pass", i % 2 ? "backward" : "forward"},
                      {"checkpoints", plan.passes[i].checkpoints},
                      {"working_set", plan.passes[i].working_set},
                      {"total", plan.passes[i].total()},
                      {"write_behind", i % 2 ? s.backward_write_behind : s.forward_write_behind}});
  }
  j["predicted_passes"] = passes;
  nlohmann::json checkpoints = nlohmann::json::array();
  for (core::NodeId v : plan.checkpoints) checkpoints.push_back(graph.node(v).name);
  j["checkpoints"] = checkpoints;
  j["head_input"] = graph.node(plan.tail_input).name;
  j["input_gradient"] = plan.input_gradient;
  j["forward_flops"] = {{"plain", plan.plain_flops}, {"tiled", plan.tiled_flops}};
  // The search's price of the plan, what `auto` compares: FLOPs plus tiles, copies and moved
  // bytes at the plan's prices (a model, not a measurement).
  j["cost"] = {{"flops", plan.cost.total()},
               {"seconds_at_prices", plan.cost.total() * plan.prices.seconds_per_flop},
               {"compute", plan.cost.compute},
               {"tiles", plan.cost.tiles},
               {"copies", plan.cost.copies},
               {"moved", plan.cost.moved}};
  nlohmann::json decisions = nlohmann::json::array();
  for (const core::OffloadDecision& d : plan.decisions) {
    decisions.push_back(
        {{"checkpoint", graph.node(d.checkpoint).name},
         {"decision", d.offload ? "offload" : "recompute"},
         {"moved_bytes", d.moved_bytes},
         {"offload_s", d.offload_s},
         {"recompute_flops",
          d.recompute_flops < 0 ? nlohmann::json(nullptr) : nlohmann::json(d.recompute_flops)},
         {"recompute_s",
          d.recompute_flops < 0 ? nlohmann::json(nullptr) : nlohmann::json(d.recompute_s)}});
  }
  j["offload"] = {{"window_bytes", plan.window_bytes},
                  {"write_behind_bytes", plan.write_behind_bytes},
                  {"moved_bytes_per_step", plan.moved_bytes()},
                  {"prices",
                   {{"measured", plan.prices.measured && !plan.prices.given},
                    {"given", plan.prices.given},
                    {"seconds_per_byte_moved", plan.prices.seconds_per_byte_moved},
                    {"seconds_per_flop", plan.prices.seconds_per_flop}}},
                  {"decisions", decisions}};
  return j.dump(2);
}

}  // namespace

PlanReport plan_model(const PlanRequest& r) {
  models::ModelOptions mo;
  mo.classes = r.classes;
  mo.norm = models::parse_norm(r.norm);
  const core::Graph graph = r.network ? r.network(r.classes) : models::build_model(r.model, mo);
  mo.in_channels = graph.node(graph.input()).channels;
  core::PlanOptions o;
  o.strategy = r.strategy;
  o.ranks = r.ranks;
  if (r.keep_inner) o.overrides.drop_inner = core::PlanOptions::DropInner::kNever;
  if (r.prices) {
    o.prices.measure = [prices = *r.prices] { return prices; };
  } else {
    o.prices.measure = [&] { return core::measure_offload_prices(o.auto_tier); };
  }
  const core::Shape input{mo.in_channels, r.height, r.width};
  if (r.background) {
    o.background = std::make_shared<core::CellMask>(
        core::synthetic_background(input, background_cell(input), *r.background, 1).cells);
  }
  PlanReport report;
  report.plan = core::make_plan(graph, input, r.budget_bytes, o);
  report.table = core::to_string(report.plan, graph);
  report.json = plan_json(report.plan, graph);
  if (r.ranks > 1) {
    // --prices' compute price, else the plan's (measured where it priced offloading, else the
    // guess).
    const double per_flop = r.prices ? r.prices->seconds_per_flop : 0;
    report.table +=
        core::split_summary(graph, report.plan, r.ranks, r.link_bytes_per_second, per_flop);
    const core::SplitTime t =
        core::split_time(graph, report.plan, r.ranks, r.link_bytes_per_second, per_flop);
    // The speed-up against one rank's own plan (made for its budget alone), at the same prices.
    core::PlanOptions alone = o;
    alone.ranks = 1;
    const core::Plan one = core::make_plan(graph, input, r.budget_bytes, alone);
    const double one_seconds =
        one.cost.total() * (per_flop > 0 ? per_flop : one.prices.seconds_per_flop);
    if (one_seconds > 0 && t.total() > 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "one rank's own plan %.3g s at the same prices: a predicted speed-up of "
                    "%.2fx\n",
                    one_seconds, one_seconds / t.total());
      report.table += buf;
    }
    nlohmann::json j = nlohmann::json::parse(report.json);
    const core::SplitBytes b = core::split_bytes(graph, report.plan, r.ranks);
    j["split"] = {{"ranks", r.ranks},
                  {"refused", core::split_refusal(graph, report.plan)},
                  {"summed_bytes",
                   {{"checkpoints", b.checkpoints},
                    {"input_gradients", b.input_gradients},
                    {"inner_checkpoints", b.inner_checkpoints},
                    {"parameter_gradients", b.parameter_gradients},
                    {"total", b.total()}}},
                  {"predicted_seconds",
                   {{"tiles", t.tiles},
                    {"exchanges", t.exchanges},
                    {"total", t.total()},
                    {"this_plan_on_one_rank", t.alone},
                    {"one_rank_own_plan", one_seconds},
                    {"link_bytes_per_second", r.link_bytes_per_second}}}};
    report.json = j.dump(2);
  }
  return report;
}

// A synthetic background's cells: about 64 across the image's shorter side, at least 2 pixels.
int64_t background_cell(const core::Shape& image) {
  return std::max<int64_t>(2, std::min(image.height, image.width) / 64);
}

namespace {

core::Graph gradcheck_network(const GradcheckRequest& r) {
  const bool random = r.model == "random" || r.model == "random-barriers";
  if (random && r.pool != "avg") {
    throw Error("--pool " + r.pool + ": a random network draws its own head; name a model");
  }
  if (r.network) return r.network(2);
  if (random) return models::random_network(r.seed, 16, 3, r.model != "random");
  models::ModelOptions mo;
  mo.norm = models::parse_norm(r.norm);
  if (r.pool == "max") {
    mo.global_max_pool = true;
  } else if (r.pool == "attention") {
    models::AttentionHead head;
    head.gated = r.gated;
    head.branches = r.branches;
    mo.attention = head;
  } else if (r.pool != "avg") {
    throw Error("unknown pool '" + r.pool + "': avg, max or attention");
  }
  if (r.pool == "attention" && r.branches != 1 && r.branches != mo.classes) {
    throw Error("--branches " + std::to_string(r.branches) + ": 1, or one per class (" +
                std::to_string(mo.classes) + ")");
  }
  return models::build_model(r.model, mo);
}

// Every checkpoint candidate a checkpoint, so there is as much to offload as the network
// allows (the last candidates may lie past the last tiled layer: drop those).
void offload_everything(const core::Graph& graph, const core::Shape& input, core::PlanOptions& o) {
  o.overrides.window_bytes = 16 << 10;
  o.overrides.block_bytes = 2 << 10;
  std::vector<core::NodeId> checkpoints = core::checkpoint_candidates(graph);
  for (; !checkpoints.empty(); checkpoints.pop_back()) {
    o.overrides.checkpoints = checkpoints;
    try {
      (void)core::make_plan(graph, input, 0, o);
      break;
    } catch (const Error&) {
    }
  }
  o.overrides.checkpoints = checkpoints;
}

core::Plan gradcheck_plan(const core::Graph& graph, const core::Shape& input,
                          const GradcheckRequest& r, const core::Background* background) {
  core::PlanOptions o;
  if (background != nullptr) o.background = std::make_shared<core::CellMask>(background->cells);
  o.strategy = r.strategy;
  o.element_bytes = r.float64 ? 8 : 4;
  o.input_gradient = r.input_gradient;
  if (r.prices) {
    o.prices.measure = [prices = *r.prices] { return prices; };
  } else if (r.budget_bytes > 0) {
    o.prices.measure = [&] { return core::measure_offload_prices(o.auto_tier, r.scratch_dir); };
  }
  if (r.budget_bytes == 0) {
    if (r.tile > 0) {
      o.overrides.tile_size = r.tile;
    } else {
      o.overrides.tiles_y = 3;
      o.overrides.tiles_x = 3;
    }
  } else if (r.tile > 0) {
    throw Error("--tile and --budget: the budget's plan picks its own tiles; give one of them");
  }
  if (r.offload != core::PlanOptions::Offload::kNever) {
    o.offload = r.offload;
    offload_everything(graph, input, o);
  }
  return core::make_plan(graph, input, r.budget_bytes, o);
}

// A check that cannot fail is not a check: one tile per segment compares plain with plain.
void require_tiles(const core::Graph& graph, const core::Plan& plan, const GradcheckRequest& r,
                   const core::Shape& input) {
  if (core::tiles(plan)) return;
  const std::string size = std::to_string(input.width) + "×" + std::to_string(input.height);
  throw Error("not tiled: every segment of the plan for " + size + " runs as one tile" +
              (r.tile > 0 ? " (--tile " + std::to_string(r.tile) +
                                " is not smaller than the segments' outputs)"
               : r.budget_bytes > 0 ? " (the budget holds it whole)"
                                    : std::string()) +
              ", so the check would compare plain with plain; use a smaller --tile or --budget, "
              "or a larger --size\n" +
              core::to_string(plan, graph));
}

bool has_running_statistics(core::Graph& graph) {
  for (auto& b : graph.module().named_buffers()) {
    if (b.key().find("running_") != std::string::npos) return true;
  }
  return false;
}

// The image's shape: the given image's, else the request's size.
core::Shape gradcheck_input(const core::Graph& graph, const GradcheckRequest& r) {
  const int64_t channels = graph.node(graph.input()).channels;
  if (!r.image.defined()) return {channels, r.height, r.width};
  if (r.background) {
    throw Error("a synthetic background goes with random pixels, not a given image");
  }
  if (r.image.dim() != 4 || r.image.size(0) != 1 || r.image.size(1) != channels) {
    throw Error("the image has " + std::to_string(r.image.dim() == 4 ? r.image.size(1) : 0) +
                " channels; the network takes " + std::to_string(channels));
  }
  return {channels, r.image.size(2), r.image.size(3)};
}

// `--ranks P`: the tiled step split over P ranks (threads, a replica of the network each, the
// same weights), every rank against one plain step; the worst rank's comparison is reported.
void check_over_threads(core::Graph& graph, const GradcheckRequest& r, c10::Device device,
                        at::ScalarType dtype, const core::Plan& plan, const at::Tensor& image,
                        const core::StepOptions& so, const core::Background* background,
                        GradcheckReport& report) {
  std::vector<core::Graph> others;
  others.reserve(static_cast<size_t>(r.ranks - 1));
  std::vector<core::Graph*> replicas{&graph};
  for (int i = 1; i < r.ranks; ++i) {
    others.push_back(gradcheck_network(r));
    others.back().module().to(device, dtype);
    core::randomise(others.back(), r.seed);
    replicas.push_back(&others.back());
  }
  const std::vector<core::Comparison> ranks =
      core::compare_split_with_plain(replicas, plan, image, r.seed, so, background);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 0 || !(ranks[i].worst() <= ranks[static_cast<size_t>(report.worst_rank)].worst())) {
      report.worst_rank = static_cast<int>(i);
    }
  }
  report.comparison = ranks[static_cast<size_t>(report.worst_rank)];
}

}  // namespace

GradcheckReport gradcheck(const GradcheckRequest& r) {
  core::Graph graph = gradcheck_network(r);
  const core::Shape input = gradcheck_input(graph, r);
  const c10::Device device = core::resolve_device(r.device);
  core::use_exact_algorithms();
  const at::ScalarType dtype = r.float64 ? at::kDouble : at::kFloat;
  graph.module().to(device, dtype);
  core::randomise(graph, r.seed);  // the same weights on every device
  if (r.inject == core::Fault::kNanStat && !has_running_statistics(graph)) {
    throw Error("--inject nan-stat: " + (r.network ? std::string("this network") : r.model) +
                " has no running statistics (batch norm has them: --norm batch)");
  }
  if (r.ranks > 1 && r.group != nullptr) {
    throw Error("--ranks splits the step over threads, --distributed over processes: not both");
  }
  if ((r.ranks > 1 || r.group != nullptr) && !r.float64) {
    throw Error("--ranks: the split step is checked in float64 for now (not --precision " +
                core::to_string(r.precision) + "; docs/slide-parallel.md)");
  }
  std::optional<core::Background> background = r.image_background;
  if (r.background) {
    background = core::synthetic_background(input, background_cell(input), *r.background, r.seed);
  }
  const core::Plan plan = gradcheck_plan(graph, input, r, background ? &*background : nullptr);
  require_tiles(graph, plan, r, input);
  if (r.inject == core::Fault::kHalo && core::halo_fault_segment(graph, plan) < 0) {
    throw Error(
        "--inject halo: every tile of this plan reads the whole of its segment's input "
        "(the receptive field covers the image), so no halo can be shortened; use a "
        "larger --size");
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(r.seed + 3);
  at::Tensor image = r.image.defined()
                         ? r.image.to(dtype).contiguous()
                         : at::randn({1, input.channels, r.height, r.width}, gen, dtype);
  GradcheckReport report;
  if (background) {
    image = core::paint_background(image, *background);
    report.glass = plan.glass;
  }
  report.float64 = r.float64;
  report.precision = r.precision;
  report.plan_table = core::to_string(plan, graph);
  report.schemes = core::schemes_of(graph, plan);
  for (const core::Segment& s : plan.segments) {
    if (s.forward.tiles() < 2 && s.backward.tiles() < 2) continue;
    for (core::NodeId v = s.input + 1; v <= s.output; ++v) {
      report.tiled_barriers += graph.node(v).is_barrier() ? 1 : 0;
    }
  }
  report.device = device.str();
  report.ranks = r.ranks;
  core::StepOptions so;
  so.scratch_dir = r.scratch_dir;
  so.input_gradient = r.input_gradient;
  so.inject = r.inject;
  if (!r.float64) so.precision = r.precision;
  try {
    if (r.group != nullptr) {
      report.ranks = r.group->size();
      report.worst_rank = r.group->rank();
      report.processes = true;
      so.ranks = r.group;
      report.comparison = core::compare_rank_with_plain(graph, plan, image, r.seed, so,
                                                        background ? &*background : nullptr);
    } else if (r.ranks > 1) {
      check_over_threads(graph, r, device, dtype, plan, image, so,
                         background ? &*background : nullptr, report);
    } else if (r.float64) {
      report.comparison = core::compare_with_plain(graph, plan, image, r.seed, so,
                                                   background ? &*background : nullptr);
    } else {
      // Float32 rounds, and bf16 far more; by how much depends on the network, the loss and
      // the quantity: each side's own rounding against float64, and the first law in float64.
      core::PrecisionCheck check = core::check_in_precision(graph, plan, image, r.seed, so,
                                                            background ? &*background : nullptr);
      report.comparison = std::move(check.tiled_vs_plain);
      report.floor = std::move(check.plain_floor);
      report.tiled_floor = std::move(check.tiled_floor);
      report.exact = std::move(check.exact);
    }
  } catch (const Error& e) {
    report.step_error = e.what();
  }
  return report;
}

}  // namespace tessel::pipelines
