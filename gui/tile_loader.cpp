#include "gui/tile_loader.h"

#include <algorithm>
#include <exception>

#include "gui/viewport.h"

namespace tessel::gui {

TileLoader::TileLoader(std::shared_ptr<const io::Slide> slide, int tile_size, int workers,
                       QObject* parent)
    : QObject(parent), slide_(std::move(slide)), tile_size_(tile_size) {
  for (int i = 0; i < std::max(1, workers); ++i) workers_.emplace_back([this] { work(); });
}

TileLoader::~TileLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void TileLoader::request(const std::vector<TileKey>& tiles) {
  {
    std::lock_guard lock(mutex_);
    std::vector<TileKey> wanted;
    wanted.reserve(tiles.size());
    for (const TileKey& key : tiles) {
      if (!in_flight_.contains(key)) wanted.push_back(key);
    }
    jobs_dropped_ += static_cast<int64_t>(queue_.request(wanted));
  }
  wake_.notify_all();
}

void TileLoader::work() {
  for (;;) {
    TileKey key;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      key = *queue_.pop();
      in_flight_.insert(key);
    }
    QImage image;
    QString failure;
    try {
      image = read(key);
    } catch (const std::exception& e) {
      failure = QString::fromStdString(e.what());
    }
    {
      std::lock_guard lock(mutex_);
      in_flight_.erase(key);
    }
    if (stop_) return;
    ++tiles_read_;
    // Queued to this object's thread; dropped if the loader is destroyed first.
    if (failure.isEmpty()) {
      QMetaObject::invokeMethod(
          this, [this, key, image = std::move(image)] { emit tileLoaded(key, image); },
          Qt::QueuedConnection);
    } else {
      QMetaObject::invokeMethod(
          this, [this, key, failure] { emit tileFailed(key, failure); }, Qt::QueuedConnection);
    }
  }
}

QImage TileLoader::read(const TileKey& key) const {
  const io::Level& level = slide_->level(key.level);
  const QRect r = tile_rect(level, key, tile_size_);
  QImage rgb(r.width(), r.height(), QImage::Format_RGB888);
  std::vector<uint8_t> pixels(static_cast<size_t>(3) * r.width() * r.height());
  slide_->read_region_into(key.level, r.x(), r.y(), r.width(), r.height(), io::Rgb{},
                           pixels.data());
  for (int y = 0; y < r.height(); ++y) {
    std::copy_n(pixels.data() + static_cast<size_t>(3) * r.width() * y, 3 * r.width(),
                rgb.scanLine(y));
  }
  // RGB32 is what the raster painter draws without converting.
  return rgb.convertToFormat(QImage::Format_RGB32);
}

}  // namespace tessel::gui
