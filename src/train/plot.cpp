// Loss plots as LLaMA-Factory draws them (see plot.h): matplotlib's default figure layout
// (axes at 12.5%–90% of the width, 11%–88% of the height), "nice" ticks, a legend.
#include "train/plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace unillm::train {

namespace {

constexpr int kWidth = 640, kHeight = 480;
constexpr double kLeft = 0.125 * kWidth, kRight = 0.9 * kWidth;
constexpr double kTop = (1 - 0.88) * kHeight, kBottom = (1 - 0.11) * kHeight;
constexpr double kBlue[3] = {0x1f / 255.0, 0x77 / 255.0, 0xb4 / 255.0};  // matplotlib "C0"

struct Range {
  double lo, hi;
};

// matplotlib's default 5% margins; a flat series gets a unit-wide range.
Range padded(const std::vector<double>& v) {
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  double lo = *mn, hi = *mx;
  if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
  const double m = 0.05 * (hi - lo);
  return {lo - m, hi + m};
}

// Tick positions at 1, 2, 2.5 or 5 × 10^k, about 4–8 of them inside r.
std::vector<double> nice_ticks(Range r) {
  const double raw = (r.hi - r.lo) / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  std::vector<double> t;
  for (double x = std::ceil(r.lo / step) * step; x <= r.hi + 1e-9 * step; x += step)
    t.push_back(std::abs(x) < 1e-12 * step ? 0.0 : x);
  return t;
}

// As matplotlib's ScalarFormatter: every label of an axis with the decimals its step needs.
std::string tick_label(double v, const std::vector<double>& ticks) {
  int decimals = 0;
  if (ticks.size() > 1) {
    const double step = ticks[1] - ticks[0];
    while (decimals < 6 && std::abs(step * std::pow(10.0, decimals) -
                                    std::round(step * std::pow(10.0, decimals))) > 1e-6)
      ++decimals;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

void text_at(cairo_t* cr, const std::string& s, double x, double y, double ax, double ay) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - ax * e.width - e.x_bearing, y - ay * e.height - e.y_bearing);
  cairo_show_text(cr, s.c_str());
}

void draw_axes(cairo_t* cr, const Curve& c, Range xr, Range yr) {
  auto px = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * (kRight - kLeft); };
  auto py = [&](double y) { return kBottom - (y - yr.lo) / (yr.hi - yr.lo) * (kBottom - kTop); };
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_set_line_width(cr, 0.8);
  cairo_rectangle(cr, kLeft, kTop, kRight - kLeft, kBottom - kTop);
  cairo_stroke(cr);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 10 * 100.0 / 72);  // matplotlib: 10 pt at 100 dpi
  const auto xt = nice_ticks(xr), yt = nice_ticks(yr);
  for (double t : xt) {
    cairo_move_to(cr, px(t), kBottom);
    cairo_line_to(cr, px(t), kBottom + 3.5);
    cairo_stroke(cr);
    text_at(cr, tick_label(t, xt), px(t), kBottom + 6, 0.5, 0);
  }
  for (double t : yt) {
    cairo_move_to(cr, kLeft, py(t));
    cairo_line_to(cr, kLeft - 3.5, py(t));
    cairo_stroke(cr);
    text_at(cr, tick_label(t, yt), kLeft - 6, py(t), 1, 0.5);
  }
  text_at(cr, c.xlabel, (kLeft + kRight) / 2, kBottom + 24, 0.5, 0);
  cairo_save(cr);
  cairo_translate(cr, kLeft - 58, (kTop + kBottom) / 2);
  cairo_rotate(cr, -M_PI / 2);
  text_at(cr, c.ylabel, 0, 0, 0.5, 0.5);
  cairo_restore(cr);
  cairo_set_font_size(cr, 12 * 100.0 / 72);
  text_at(cr, c.title, (kLeft + kRight) / 2, kTop - 8, 0.5, 1);
}

void draw_line(cairo_t* cr, const Curve& c, const std::vector<double>& ys, Range xr, Range yr,
               double alpha) {
  cairo_save(cr);
  cairo_rectangle(cr, kLeft, kTop, kRight - kLeft, kBottom - kTop);
  cairo_clip(cr);
  cairo_set_source_rgba(cr, kBlue[0], kBlue[1], kBlue[2], alpha);
  cairo_set_line_width(cr, 1.5 * 100.0 / 72);  // matplotlib: 1.5 pt
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (size_t i = 0; i < ys.size(); ++i) {
    const double x = kLeft + (c.steps[i] - xr.lo) / (xr.hi - xr.lo) * (kRight - kLeft);
    const double y = kBottom - (ys[i] - yr.lo) / (yr.hi - yr.lo) * (kBottom - kTop);
    if (i == 0)
      cairo_move_to(cr, x, y);
    else
      cairo_line_to(cr, x, y);
  }
  if (ys.size() == 1) cairo_rel_line_to(cr, 0.01, 0);  // a lone point still shows
  cairo_stroke(cr);
  cairo_restore(cr);
}

void draw_legend(cairo_t* cr) {
  const double w = 118, h = 46, x = kRight - w - 8, y = kTop + 8;
  cairo_set_source_rgba(cr, 1, 1, 1, 0.8);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill_preserve(cr);
  cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  cairo_set_font_size(cr, 10 * 100.0 / 72);
  const char* names[2] = {"original", "smoothed"};
  for (int i = 0; i < 2; ++i) {
    const double ly = y + 14 + 19 * i;
    cairo_set_source_rgba(cr, kBlue[0], kBlue[1], kBlue[2], i == 0 ? 0.4 : 1.0);
    cairo_set_line_width(cr, 1.5 * 100.0 / 72);
    cairo_move_to(cr, x + 8, ly);
    cairo_line_to(cr, x + 36, ly);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    text_at(cr, names[i], x + 44, ly, 0, 0.5);
  }
}

}  // namespace

std::vector<double> smooth_curve(const std::vector<double>& values) {
  std::vector<double> out;
  if (values.empty()) return out;
  const double n = static_cast<double>(values.size());
  const double weight = 1.8 * (1.0 / (1.0 + std::exp(-0.05 * n)) - 0.5);
  double last = values[0];
  for (double v : values) {
    last = last * weight + (1 - weight) * v;
    out.push_back(last);
  }
  return out;
}

void plot_curve(const Curve& c, const std::string& path) {
  UNILLM_CHECK(!c.values.empty() && c.steps.size() == c.values.size(), "[plot] empty or ragged curve");
  cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, kWidth, kHeight);
  cairo_t* cr = cairo_create(s);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const Range xr = padded(c.steps), yr = padded(c.values);
  draw_axes(cr, c, xr, yr);
  draw_line(cr, c, c.values, xr, yr, 0.4);
  draw_line(cr, c, smooth_curve(c.values), xr, yr, 1.0);
  draw_legend(cr);
  cairo_destroy(cr);
  const std::string tmp = path + ".tmp";
  const cairo_status_t st = cairo_surface_write_to_png(s, tmp.c_str());
  cairo_surface_destroy(s);
  if (st != CAIRO_STATUS_SUCCESS)
    UNILLM_THROW(IoError, "[plot] cannot write ", path, ": ", cairo_status_to_string(st));
  std::filesystem::rename(tmp, path);
}

std::vector<std::string> plot_loss(const std::string& output_dir, const nlohmann::json& log_history,
                                   const std::vector<std::string>& keys,
                                   const std::string& title_dir) {
  std::vector<std::string> written;
  for (const auto& key : keys) {
    Curve c;
    for (const auto& e : log_history)
      if (e.contains(key) && e[key].is_number() && e.contains("step")) {
        c.steps.push_back(e["step"].get<double>());
        c.values.push_back(e[key].get<double>());
      }
    if (c.values.empty()) continue;
    c.title = "training " + key + " of " + (title_dir.empty() ? output_dir : title_dir);
    c.ylabel = key;
    std::string file = key;
    std::replace(file.begin(), file.end(), '/', '_');
    written.push_back((std::filesystem::path(output_dir) / ("training_" + file + ".png")).string());
    plot_curve(c, written.back());
  }
  return written;
}

}  // namespace unillm::train
