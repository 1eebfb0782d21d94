// Loss plots: LLaMA-Factory's smoothing formula, and a PNG that shows the curve where
// matplotlib's default layout puts it.
#include "train/plot.h"

#include <cairo.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/run_cli.h"

namespace unillm::train {
namespace {

TEST(Plot, SmoothingIsLlamaFactorys) {
  const std::vector<double> v = {4.0, 2.0, 3.0};
  const double w = 1.8 * (1.0 / (1.0 + std::exp(-0.05 * 3)) - 0.5);  // sigmoid weight, n = 3
  auto s = smooth_curve(v);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0], 4.0);
  EXPECT_DOUBLE_EQ(s[1], 4.0 * w + (1 - w) * 2.0);
  EXPECT_DOUBLE_EQ(s[2], s[1] * w + (1 - w) * 3.0);
  EXPECT_TRUE(smooth_curve({}).empty());
}

// #1f77b4 drawn with alpha a over white, allowing anti-aliasing.
bool is_blue(uint32_t px, double a = 1.0) {
  const int r = (px >> 16) & 255, g = (px >> 8) & 255, b = px & 255;
  auto over_white = [a](int c) { return a * c + (1 - a) * 255; };
  return std::abs(r - over_white(0x1f)) < 40 && std::abs(g - over_white(0x77)) < 40 &&
         std::abs(b - over_white(0xb4)) < 40;
}

TEST(Plot, PngShowsTheCurveInMatplotlibsLayout) {
  const std::string dir = testing::temp_dir("plot");
  nlohmann::json history = nlohmann::json::array();
  for (int step = 1; step <= 50; ++step) history.push_back({{"step", step}, {"loss", 10.0 - 0.16 * step}});
  history.push_back({{"step", 50}, {"eval_loss", 2.5}});
  auto files = plot_loss(dir, history, {"loss", "eval_loss", "eval_accuracy"});
  ASSERT_EQ(files.size(), 2u);  // no eval_accuracy entries: skipped
  EXPECT_EQ(files[0], dir + "/training_loss.png");
  EXPECT_TRUE(std::filesystem::exists(dir + "/training_eval_loss.png"));

  cairo_surface_t* s = cairo_image_surface_create_from_png(files[0].c_str());
  ASSERT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  EXPECT_EQ(w, 640);
  EXPECT_EQ(h, 480);
  const auto* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  auto px = [&](int x, int y) { return *reinterpret_cast<const uint32_t*>(data + y * stride + 4 * x); };
  EXPECT_EQ(px(2, 2) & 0xffffff, 0xffffffu);  // white background
  // The raw curve (alpha 0.4) passes through (step 25, loss 6): axes from 12.5% to 90% of the
  // width and 11% to 88% of the height, data padded by 5% on each side.
  auto map = [](double v, double lo, double hi, double a, double b) {
    const double m = 0.05 * (hi - lo);
    return a + (v - (lo - m)) / ((hi + m) - (lo - m)) * (b - a);
  };
  const int x = static_cast<int>(map(25, 1, 50, 80, 576));
  const int y = static_cast<int>(map(6.0, 10.0 - 0.16, 10.0 - 0.16 * 50, 57.6, 427.2));
  int blue_near = 0, blue_total = 0;
  for (int dy = -3; dy <= 3; ++dy) blue_near += is_blue(px(x, y + dy), 0.4);
  for (int yy = 0; yy < h; ++yy)
    for (int xx = 0; xx < w; ++xx) blue_total += is_blue(px(xx, yy));
  EXPECT_GT(blue_near, 0) << "no curve at (" << x << ", " << y << ")";
  EXPECT_GT(blue_total, 400);  // the smoothed curve runs across the axes
  cairo_surface_destroy(s);
}

}  // namespace
}  // namespace unillm::train
