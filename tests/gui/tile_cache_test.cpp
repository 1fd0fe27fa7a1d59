// TileCache (byte-bounded LRU), TileJobQueue (newest request first, stale jobs dropped) and
// TileLoader (reads tiles on worker threads) on a real slide.
#include <QSignalSpy>
#include <QTest>
#include <QThread>

#include "gui/tile_cache.h"
#include "gui/tile_loader.h"
#include "gui/viewport.h"
#include "tests/io/shared_slides.h"

namespace tessel::gui {

namespace {

QPixmap tile(int side) {
  QPixmap p(side, side);
  p.fill(Qt::red);
  return p;
}

}  // namespace

class TileCacheTest : public QObject {
  Q_OBJECT

 private slots:
  void evictsTheLeastRecentlyUsedTilesPastItsByteCapacity() {
    const int64_t one = TileCache::bytes_of(tile(16));
    TileCache cache(3 * one);
    for (int i = 0; i < 4; ++i) cache.insert({0, i, 0}, tile(16));
    QCOMPARE(cache.size(), size_t{3});
    QCOMPARE(cache.bytes(), 3 * one);
    QVERIFY(!cache.contains({0, 0, 0}));
    QVERIFY(cache.contains({0, 3, 0}));
  }

  void findMarksATileAsJustUsedSoItOutlivesOlderOnes() {
    const int64_t one = TileCache::bytes_of(tile(16));
    TileCache cache(2 * one);
    cache.insert({0, 0, 0}, tile(16));
    cache.insert({0, 1, 0}, tile(16));
    QVERIFY(cache.find({0, 0, 0}) != nullptr);
    cache.insert({0, 2, 0}, tile(16));
    QVERIFY(cache.contains({0, 0, 0}));
    QVERIFY(!cache.contains({0, 1, 0}));
  }

  void peekDoesNotChangeWhichTileGoesFirst() {
    const int64_t one = TileCache::bytes_of(tile(16));
    TileCache cache(2 * one);
    cache.insert({0, 0, 0}, tile(16));
    cache.insert({0, 1, 0}, tile(16));
    QVERIFY(cache.peek({0, 0, 0}) != nullptr);
    cache.insert({0, 2, 0}, tile(16));
    QVERIFY(!cache.contains({0, 0, 0}));
  }

  void replacingATileCountsItsBytesOnce() {
    TileCache cache(1 << 20);
    cache.insert({1, 2, 3}, tile(16));
    cache.insert({1, 2, 3}, tile(32));
    QCOMPARE(cache.size(), size_t{1});
    QCOMPARE(cache.bytes(), TileCache::bytes_of(tile(32)));
  }

  void keepsATileLargerThanTheWholeCapacityAlone() {
    TileCache cache(10);
    cache.insert({0, 0, 0}, tile(16));
    cache.insert({0, 1, 0}, tile(16));
    QCOMPARE(cache.size(), size_t{1});
    QVERIFY(cache.contains({0, 1, 0}));
  }

  void queueServesTheNewestRequestInItsOrderAndDropsTilesNoLongerWanted() {
    TileJobQueue queue;
    queue.request({{0, 0, 0}, {0, 1, 0}, {0, 2, 0}});
    // The view moved: tile (1, 0) is still wanted, (0, 0) and (2, 0) scrolled away.
    const size_t dropped = queue.request({{0, 5, 0}, {0, 1, 0}});
    QCOMPARE(dropped, size_t{2});
    QCOMPARE(queue.pop(), std::optional<TileKey>(TileKey{0, 5, 0}));
    QCOMPARE(queue.pop(), std::optional<TileKey>(TileKey{0, 1, 0}));
    QVERIFY(!queue.pop().has_value());
  }

  void queueHoldsEachTileOnce() {
    TileJobQueue queue;
    queue.request({{0, 1, 1}, {0, 1, 1}, {1, 1, 1}});
    QCOMPARE(queue.size(), size_t{2});
  }

  void loaderReadsTheRequestedTilesWithTheirLevelSizes() {
    auto slide = std::make_shared<const io::Slide>(test::shared_slide("cmu-1-small-region.svs"));
    TileLoader loader(slide, 256, 2);
    QSignalSpy loaded(&loader, &TileLoader::tileLoaded);
    // The last column and row of a 2220 × 2967 level are partial tiles.
    const std::vector<TileKey> keys = {{0, 0, 0}, {0, 8, 11}};
    loader.request(keys);
    QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 2, 20000);
    for (const QList<QVariant>& signal : loaded) {
      const auto key = signal.at(0).value<TileKey>();
      const auto image = signal.at(1).value<QImage>();
      QCOMPARE(image.size(), tile_rect(slide->level(0), key, 256).size());
      QCOMPARE(image.format(), QImage::Format_RGB32);
    }
    const QImage last = loaded.at(0).at(0).value<TileKey>() == TileKey{0, 8, 11}
                            ? loaded.at(0).at(1).value<QImage>()
                            : loaded.at(1).at(1).value<QImage>();
    QCOMPARE(last.size(), QSize(2220 - 8 * 256, 2967 - 11 * 256));
    QCOMPARE(loader.tiles_read(), int64_t{2});
  }

  void loaderReportsATileOfABrokenSlideAsFailedWithTheReason() {
    auto slide = std::make_shared<const io::Slide>(test::shared_slide("unreadable.svs"));
    TileLoader loader(slide, 256, 1);
    QSignalSpy failed(&loader, &TileLoader::tileFailed);
    loader.request({{0, 0, 0}});
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 20000);
    QVERIFY2(failed.at(0).at(1).toString().contains(QStringLiteral("unreadable.svs")),
             qPrintable(failed.at(0).at(1).toString()));
  }

  void aLoaderDropsQueuedTilesWhenTheViewMovesOnAndReadsTheNewOnes() {
    auto slide = std::make_shared<const io::Slide>(test::shared_slide("cmu-1-small-region.svs"));
    TileLoader loader(slide, 256, 1);
    QSignalSpy loaded(&loader, &TileLoader::tileLoaded);
    std::vector<TileKey> all;
    for (int64_t r = 0; r < 12; ++r) {
      for (int64_t c = 0; c < 9; ++c) all.push_back({0, c, r});
    }
    loader.request(all);
    loader.request({{0, 4, 6}});  // the view moved: one worker cannot have read 107 tiles yet
    QTRY_VERIFY_WITH_TIMEOUT(loader.jobs_dropped() > 0, 20000);
    const auto read_4_6 = [&] {
      for (const QList<QVariant>& signal : loaded) {
        if (signal.at(0).value<TileKey>() == TileKey{0, 4, 6}) return true;
      }
      return false;
    };
    QTRY_VERIFY_WITH_TIMEOUT(read_4_6(), 20000);
    QTest::qWait(100);
    // Only the tiles read before the view moved (one or two, more on a busy machine) and the one
    // wanted; every other job was dropped unread.
    QVERIFY2(loaded.count() < 54, qPrintable(QString::number(loaded.count())));
    QCOMPARE(loader.jobs_dropped() + loaded.count(), int64_t{108});
  }

  void destroyingALoaderWithQueuedTilesStopsItsWorkers() {
    auto slide = std::make_shared<const io::Slide>(test::shared_slide("cmu-1-small-region.svs"));
    auto loader = std::make_unique<TileLoader>(slide, 256, 2);
    std::vector<TileKey> all;
    for (int64_t r = 0; r < 12; ++r) {
      for (int64_t c = 0; c < 9; ++c) all.push_back({0, c, r});
    }
    loader->request(all);
    loader.reset();  // must not hang nor deliver to a dead object
    QTest::qWait(50);
  }
};

}  // namespace tessel::gui

QTEST_MAIN(tessel::gui::TileCacheTest)
#include "tile_cache_test.moc"
