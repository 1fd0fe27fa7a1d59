// Reads the viewer's tiles on worker threads through io::Slide, never on the UI thread. The view
// sends the tiles it needs (request); workers take them newest-first from a TileJobQueue, read
// them into QImages (QPixmap is UI-thread only), and the results come back as signals on the
// loader's thread. Destroying the loader stops and joins its workers.
#pragma once

#include <QImage>
#include <QObject>
#include <QString>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "gui/tile_cache.h"
#include "io/slide.h"

namespace tessel::gui {

class TileLoader : public QObject {
  Q_OBJECT

 public:
  TileLoader(std::shared_ptr<const io::Slide> slide, int tile_size, int workers,
             QObject* parent = nullptr);
  ~TileLoader() override;
  TileLoader(const TileLoader&) = delete;
  TileLoader& operator=(const TileLoader&) = delete;

  // The tiles the view needs now, most important first; queued tiles not among them are dropped.
  // Tiles already being read are not queued again.
  void request(const std::vector<TileKey>& tiles);

  int64_t tiles_read() const { return tiles_read_.load(); }
  int64_t jobs_dropped() const { return jobs_dropped_.load(); }

 signals:
  void tileLoaded(tessel::gui::TileKey key, QImage image);
  void tileFailed(tessel::gui::TileKey key, QString reason);

 private:
  void work();
  QImage read(const TileKey& key) const;

  std::shared_ptr<const io::Slide> slide_;
  int tile_size_;
  std::mutex mutex_;
  std::condition_variable wake_;
  TileJobQueue queue_;                                  // guarded by mutex_
  std::unordered_set<TileKey, TileKeyHash> in_flight_;  // guarded by mutex_
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> tiles_read_{0}, jobs_dropped_{0};
  std::vector<std::thread> workers_;
};

}  // namespace tessel::gui
