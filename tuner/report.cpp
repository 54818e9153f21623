#include "tuner/report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <set>
#include <string_view>

#include "core/error.h"
#include "generator/variants.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/dispatch/tuned_id.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/runtime.h"
#include "tuner/gains.h"

namespace attune::tuner {

namespace {

constexpr std::size_t kMaxKeyCharts = 12;  // per device: the keys with most measurements
constexpr std::size_t kMaxBars = 30;       // per key chart: the fastest variants

std::string format(const char* spec, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), spec, value);
  return text;
}

// Milliseconds with about four significant digits and no exponent.
std::string format_ms(double ms) {
  if (ms >= 100) return format("%.1f", ms);
  if (ms >= 1) return format("%.3f", ms);
  if (ms >= 0.01) return format("%.4f", ms);
  return format("%.6f", ms);
}

std::string format_gain(double gain) { return format("%.2fx", gain); }

// Three significant digits and no exponent: 312, 31.2, 0.000589.
std::string format_significant(double value) {
  if (!(value > 0)) return format("%.0f", value);
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(value))));
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

// "sq48 sk48 b1 h2" (h2/1 when the kv heads differ).
std::string sizes_text(const tuning_db::ProblemRecord& p) {
  std::string s = "sq" + std::to_string(p.seqlen_q) + " sk" + std::to_string(p.seqlen_k) + " b" +
                  std::to_string(p.batch) + " h" + std::to_string(p.heads_q);
  if (p.heads_kv != p.heads_q) s += "/" + std::to_string(p.heads_kv);
  return s;
}

// Appends the parts to `out`, without the temporaries of a + b + c.
void append(std::string& out, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts) out += part;
}

// An SVG coordinate: one decimal.
std::string coordinate(double value) { return format("%.1f", value); }

struct Bar {
  std::string label;       // left of the bar
  double value = 0;        // the bar's length, in axis units
  std::string value_text;  // right of the bar
  std::string kind;        // CSS classes of the bar and its texts: best, default, gain
  std::string tooltip;
};

// The largest tick step of 1, 2 or 5 times a power of ten that gives at
// most about five intervals up to `max`.
double tick_step(double max) {
  const double raw = max / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
}

std::string tick_text(double value, double step) {
  // Enough decimals to tell neighbouring ticks apart.
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

// A horizontal bar chart: one row per bar, labels on the left, values on the
// right, an x axis with ticks and `axis_label` below, and an optional dashed
// reference line (the 1x of a gain chart). Sized in SVG user units; the page
// scales it to the column width, which keeps the proportions.
std::string bar_chart_svg(const std::vector<Bar>& bars, const std::string& axis_label, std::optional<double> reference,
                          int width) {
  constexpr double kCharWidth = 7.3;  // 12 px monospace
  constexpr int kRow = 24, kBar = 16, kTop = 8, kAxis = 46;
  std::size_t label_chars = 0, value_chars = 0;
  for (const Bar& b : bars) {
    label_chars = std::max(label_chars, b.label.size());
    value_chars = std::max(value_chars, b.value_text.size());
  }
  const double label_width = std::min(static_cast<double>(label_chars) * kCharWidth + 12, width * 0.55);
  const double x0 = label_width;
  // Room right of the longest bar for its value, and for the last tick's label.
  const double plot_width = width - x0 - std::max(static_cast<double>(value_chars) * kCharWidth + 12, 24.0);
  double max = reference.value_or(0);
  for (const Bar& b : bars) max = std::max(max, b.value);
  if (!(max > 0)) max = 1;
  const double step = tick_step(max);
  const double axis_max = std::ceil(max / step - 1e-9) * step;
  const auto x_of = [&](double v) { return x0 + plot_width * v / axis_max; };
  const int plot_height = kRow * static_cast<int>(bars.size());
  const int height = kTop + plot_height + kAxis;

  const std::string w_text = std::to_string(width), h_text = std::to_string(height);
  std::string s;
  append(s, {"<svg class=\"chart\" viewBox=\"0 0 ", w_text, " ", h_text, "\" width=\"", w_text, "\" height=\"", h_text,
             "\" style=\"max-width:", w_text, "px\" role=\"img\" aria-label=\"", html_escape(axis_label), "\">\n"});
  // Grid lines and tick labels first, so the bars draw over them.
  const int y_axis = kTop + plot_height;
  const std::string top = std::to_string(kTop), bottom = std::to_string(y_axis);
  for (int i = 0; i * step <= axis_max + step * 1e-6; ++i) {
    const double v = i * step;
    const std::string x = coordinate(x_of(v));
    append(s, {"<line class=\"grid\" x1=\"", x, "\" y1=\"", top, "\" x2=\"", x, "\" y2=\"", bottom, "\"/>"});
    append(s, {"<text class=\"tick\" x=\"", x, "\" y=\"", std::to_string(y_axis + 15), "\" text-anchor=\"middle\">",
               tick_text(v, step), "</text>\n"});
  }
  append(s, {"<line class=\"axis\" x1=\"", coordinate(x0), "\" y1=\"", bottom, "\" x2=\"", coordinate(x0 + plot_width),
             "\" y2=\"", bottom, "\"/>\n"});
  append(s, {"<text class=\"axis-label\" x=\"", coordinate(x0 + plot_width / 2), "\" y=\"", std::to_string(y_axis + 36),
             "\" text-anchor=\"middle\">", html_escape(axis_label), "</text>\n"});
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = kTop + kRow * static_cast<int>(i) + (kRow - kBar) / 2;
    const double w = std::max(x_of(b.value) - x0, 1.0);
    const std::string text_y = std::to_string(y + kBar - 3);
    const std::string kind = b.kind.empty() ? "" : " " + b.kind;
    append(s, {"<g><title>", html_escape(b.tooltip.empty() ? b.label : b.tooltip), "</title>"});
    append(s, {"<text class=\"label", kind, "\" x=\"", coordinate(x0 - 6), "\" y=\"", text_y, "\" text-anchor=\"end\">",
               html_escape(b.label), "</text>"});
    append(s, {"<rect class=\"bar", kind, "\" x=\"", coordinate(x0), "\" y=\"", std::to_string(y), "\" width=\"",
               coordinate(w), "\" height=\"", std::to_string(kBar), "\"/>"});
    append(s, {"<text class=\"value", kind, "\" x=\"", coordinate(x0 + w + 5), "\" y=\"", text_y, "\">",
               html_escape(b.value_text), "</text></g>\n"});
  }
  if (reference) {
    const std::string x = coordinate(x_of(*reference));
    append(s, {"<line class=\"reference\" x1=\"", x, "\" y1=\"", std::to_string(kTop - 4), "\" x2=\"", x, "\" y2=\"",
               bottom, "\"/>\n"});
  }
  s += "</svg>\n";
  return s;
}

// A row of the best-variant table.
std::string best_table_row(const KeyAnalysis& k) {
  const std::string tflops = k.tflops ? format_significant(*k.tflops) : "-";
  const std::string gain = k.gain ? format_gain(*k.gain) : "-";
  // The model's bound beside the measurement, and the share of it reached.
  std::string predicted = "-";
  if (k.predicted_tflops && *k.predicted_tflops > 0) {
    predicted = format_significant(*k.predicted_tflops);
    if (k.tflops) predicted += " (" + format("%.0f", 100.0 * *k.tflops / *k.predicted_tflops) + "%)";
  }
  return "<tr><td><code>" + html_escape(k.best.key.to_string()) + "</code></td><td><code>" +
         html_escape(k.best.variant_id) + "</code></td><td class=\"num\">" + format_ms(k.best.median_ms) +
         "</td><td class=\"num\">" + tflops + "</td><td class=\"num\">" + predicted + "</td><td class=\"num\">" + gain +
         "</td><td class=\"num\">" + std::to_string(k.rows.size()) + "</td></tr>\n";
}

// One bar per variant (its fastest ok measurement: a key may hold several
// problem sizes), and the failed variants with their failure counts.
std::string key_chart(const KeyAnalysis& k) {
  std::vector<Bar> bars;
  std::set<std::string> seen;
  std::map<std::string, int> failed;
  std::set<std::string> sizes;
  for (const tuning_db::MeasurementRow& m : k.rows) {
    sizes.insert(sizes_text(m.problem));
    if (!m.ok || !m.median_ms) {
      ++failed[m.variant_id];
      continue;
    }
    if (!seen.insert(m.variant_id).second) continue;
    const bool is_best = m.variant_id == k.best.variant_id;
    const bool is_default = k.default_id && m.variant_id == *k.default_id;
    std::string text = format_ms(*m.median_ms) + " ms";
    if (is_best) text += "  best";
    if (is_default) text += "  default";
    bars.push_back({.label = m.variant_id,
                    .value = *m.median_ms,
                    .value_text = text,
                    .kind = std::string(is_best ? "best" : "") + (is_best && is_default ? " " : "") +
                            (is_default ? "default" : ""),
                    .tooltip = m.variant_id + ": " + format_ms(*m.median_ms) + " ms on " + sizes_text(m.problem)});
  }
  const std::size_t shown = std::min(bars.size(), kMaxBars);
  const std::size_t hidden = bars.size() - shown;
  bars.resize(shown);

  std::string sizes_list;
  for (const std::string& size : sizes) sizes_list += (sizes_list.empty() ? "" : ", ") + size;
  std::string s = "<figure>\n<figcaption><code>" + html_escape(k.best.key.to_string()) +
                  "</code><br><span class=\"note\">" + std::to_string(k.rows.size()) + " measurements on " +
                  html_escape(sizes_list) + "; each bar is a variant's fastest</span></figcaption>\n";
  s += bar_chart_svg(bars, "median time (ms), shorter is faster", std::nullopt, 640);
  if (hidden > 0) s += "<p class=\"note\">" + std::to_string(hidden) + " slower variants not shown</p>\n";
  if (!failed.empty()) {
    s += "<p class=\"failed\">failed:";
    for (const auto& [variant, count] : failed) {
      s += " <code>" + html_escape(variant) + "</code>" + (count > 1 ? " (" + std::to_string(count) + "x)" : "") + ";";
    }
    s.pop_back();
    s += "</p>\n";
  }
  s += "</figure>\n";
  return s;
}

std::string gain_chart(const std::vector<KeyAnalysis>& keys) {
  std::vector<Bar> bars;
  std::vector<std::string> unmeasured;
  for (const KeyAnalysis& k : keys) {
    if (!k.gain) {
      unmeasured.push_back(k.best.key.to_string());
      continue;
    }
    bars.push_back({.label = k.best.key.to_string(),
                    .value = *k.gain,
                    .value_text = format_gain(*k.gain),
                    .kind = *k.gain >= 1.005 ? "gain" : "",
                    .tooltip = k.best.key.to_string() + ": " + k.best.variant_id + " " + format_gain(*k.gain) +
                               " faster than " + k.default_id.value_or("the default")});
  }
  std::string s =
      "<figure class=\"wide\">\n<figcaption>Gain of tuned over default <span class=\"note\">(default "
      "median / best median; dashed line: 1x, no gain)</span></figcaption>\n";
  if (bars.empty()) {
    s += "<p class=\"note\">The heuristic default has no ok measurement on any key of this device.</p>\n";
  } else {
    s += bar_chart_svg(bars, "speed-up over the heuristic default (x)", 1.0, 1100);
  }
  if (!unmeasured.empty()) {
    s += "<p class=\"failed\">no ok measurement of the default:";
    for (const std::string& key : unmeasured) s += " <code>" + html_escape(key) + "</code>;";
    s.pop_back();
    s += "</p>\n";
  }
  s += "</figure>\n";
  return s;
}

constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif; margin: 24px; color: #1b1f24;
       background: #fff; max-width: 1400px; }
h1 { font-size: 24px; margin: 0 0 12px; }
h2 { font-size: 19px; margin: 32px 0 8px; padding-top: 10px; border-top: 2px solid #d0d7de; }
h3 { font-size: 16px; margin: 22px 0 8px; }
code { font-family: "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
table { border-collapse: collapse; font-size: 13.5px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e1e4e8; text-align: left; }
th { background: #f3f5f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.summary th { background: none; font-weight: normal; color: #57606a; }
.note { color: #57606a; font-size: 12.5px; }
.failed { color: #8c959f; font-size: 12.5px; margin: 2px 0 0; }
.legend { font-size: 13px; margin: 6px 0; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: -1px; margin: 0 4px 0 10px; }
.grid-figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 18px 28px; }
figure { margin: 0; }
figure.wide { max-width: 1100px; }
figcaption { font-size: 13.5px; margin-bottom: 4px; }
svg.chart { width: 100%; height: auto; display: block; }  /* max-width: the natural size, per chart */
svg text { font-family: "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace; font-size: 12px;
           fill: #24292f; }
svg text.best { font-weight: bold; fill: #b33c00; }
svg text.tick { fill: #57606a; }
svg text.axis-label { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 13px; fill: #24292f; }
svg rect.bar { fill: #6e93c4; }
svg rect.bar.best { fill: #e8702a; }
svg rect.bar.default { stroke: #24292f; stroke-width: 2; }
svg rect.bar.gain { fill: #3f9e6a; }
svg text.value.gain { fill: #1f6e43; font-weight: bold; }
svg line.grid { stroke: #eaeef2; stroke-width: 1; }
svg line.axis { stroke: #57606a; stroke-width: 1; }
svg line.reference { stroke: #24292f; stroke-width: 1.5; stroke-dasharray: 4 3; }
)";

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string html_report(const tuning_db::TuningDb& db, const std::string& title) {
  // Per device: its best rows with their measurements, and (from every
  // measurement) its counts and the keys where no variant ran ok.
  struct Device {
    std::vector<KeyAnalysis> keys;
    std::set<std::string> measured_keys;
    std::size_t measurements = 0, failed = 0;
  };
  std::map<std::string, Device> devices;  // by key: a stable, sorted order
  std::set<std::string> all_keys, tuned_keys;
  std::size_t measured = 0, failed = 0;
  for (const tuning_db::MeasurementRow& m : db.all_measurements()) {
    Device& d = devices[m.device_key];
    d.measured_keys.insert(m.problem.key.to_string());
    all_keys.insert(m.problem.key.to_string());
    ++d.measurements;
    ++measured;
    if (!m.ok) {
      ++d.failed;
      ++failed;
    }
  }
  for (const tuning_db::BestRow& row : db.best_all()) {
    tuned_keys.insert(row.key.to_string());
    devices[row.device_key].keys.push_back(analyze_key(db, row));
  }

  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  html_escape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += "<h1>" + html_escape(title) + "</h1>\n<table class=\"summary\">\n";
  const auto summary_row = [&](const std::string& name, const std::string& value_html) {
    s += "<tr><th>" + name + "</th><td>" + value_html + "</td></tr>\n";
  };
  summary_row("Database", "<code>" + html_escape(std::filesystem::absolute(db.path()).string()) + "</code>");
  summary_row("Schema version", std::to_string(db.schema_version()));
  std::string device_list = std::to_string(devices.size());
  std::size_t index = 0;
  for (const auto& [key, d] : devices) {
    device_list += (index == 0 ? ": " : ", ") +
                   ("<a href=\"#device-" + std::to_string(index) + "\"><code>" + html_escape(key) + "</code></a>");
    ++index;
  }
  summary_row("Devices", device_list);
  summary_row("Problem keys", std::to_string(all_keys.size()) + " <span class=\"note\">(" +
                                  std::to_string(tuned_keys.size()) + " with a best variant)</span>");
  summary_row("Measurements", std::to_string(measured) + " <span class=\"note\">(" + std::to_string(measured - failed) +
                                  " ok, " + std::to_string(failed) + " failed)</span>");
  s += "</table>\n";
  if (devices.empty()) s += "<p class=\"note\">The database holds no measurements yet: run attune tune.</p>\n";

  index = 0;
  for (const auto& [device_key, d] : devices) {
    const std::vector<KeyAnalysis>& keys = d.keys;
    s += "<section>\n<h2 id=\"device-" + std::to_string(index++) + "\">Device <code>" + html_escape(device_key) +
         "</code></h2>\n<p class=\"note\">" + std::to_string(d.measured_keys.size()) + " problem keys, " +
         std::to_string(d.measurements) + " measurements (" + std::to_string(d.failed) + " failed)</p>\n";
    std::set<std::string> untuned = d.measured_keys;
    for (const KeyAnalysis& k : keys) untuned.erase(k.best.key.to_string());
    if (!untuned.empty()) {
      s += "<p class=\"failed\">no variant ran ok on:";
      for (const std::string& key : untuned) s += " <code>" + html_escape(key) + "</code>;";
      s.pop_back();
      s += "</p>\n";
    }
    if (keys.empty()) {
      s += "</section>\n";
      continue;
    }
    s += "<h3>Best variant per problem key</h3>\n<table class=\"best\">\n<tr><th>Problem key</th><th>Best "
         "variant</th><th>Median ms</th><th>TFLOP/s</th><th>Model bound (reached)</th><th>Gain over default</th>"
         "<th>Measurements</th></tr>\n";
    for (const KeyAnalysis& k : keys) s += best_table_row(k);
    s += "</table>\n";
    s += "<h3>Tuning gain</h3>\n" + gain_chart(keys);

    // The keys with most measurements, ties in the database's order.
    std::vector<const KeyAnalysis*> charted;
    charted.reserve(keys.size());
    for (const KeyAnalysis& k : keys) charted.push_back(&k);
    std::stable_sort(charted.begin(), charted.end(),
                     [](const KeyAnalysis* a, const KeyAnalysis* b) { return a->rows.size() > b->rows.size(); });
    if (charted.size() > kMaxKeyCharts) charted.resize(kMaxKeyCharts);
    s += "<h3>Variants per problem key</h3>\n<p class=\"note\">" +
         (keys.size() > charted.size() ? "The " + std::to_string(charted.size()) + " of " +
                                             std::to_string(keys.size()) + " keys with most measurements."
                                       : "All " + std::to_string(keys.size()) + " keys.") +
         "</p>\n<p class=\"legend\"><span class=\"swatch\" style=\"background:#e8702a\"></span>best"
         "<span class=\"swatch\" style=\"background:#6e93c4\"></span>other ok variants"
         "<span class=\"swatch\" style=\"border:2px solid #24292f; width:9px; height:9px\"></span>outlined: the "
         "heuristic default</p>\n";
    s += "<div class=\"grid-figs\">\n";
    for (const KeyAnalysis* k : charted) s += key_chart(*k);
    s += "</div>\n</section>\n";
  }
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace attune::tuner
