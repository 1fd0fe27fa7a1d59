// Offload sizing (engine-internal): the tile store's window and blocks for a plan, the bytes its
// passes hold open and read back, partly resident checkpoints, and the bytes a plan moves a step
// (DELTA's price of an offloaded checkpoint, halo-exact).
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan/tile_cost.h"

namespace tessel::core::planning {

// The store's unit for a window: a sixteenth of it, at least 1 MiB (a disk's and a PCIe copy's
// efficient size) and at most a quarter. Every pass counts four blocks beyond the window (one
// crossing its end, one in the caller's hand, one written, one queued), so blocks of a quarter
// counted twice the window; the blocks tiles cut are mostly far smaller (rows of vgg-mini 16384²
// in 1 GiB: ~3 MiB against a 59 MiB block).
int64_t default_block_bytes(int64_t window);

// Sizes of the offload machinery (core/store/tile_store.h).
struct Offloading {
  int64_t window_bytes = 0, block_bytes = 0;
  bool partly_resident = false;  // keep blocks resident where the budget leaves room
  // Where inner checkpoints the budget cannot hold whole go (SubSegments::tier); resident:
  // nowhere (such segments recompute in rounds). `force_inner`: there even where they fit.
  Tier inner_tier = Tier::kResident;
  bool force_inner = false;
  // Resident bytes the store holds during a pass: the blocks read ahead within the window (one
  // may cross its end, one is in the caller's hand) and the writes behind (write_behind_bytes()
  // in flight when the caller puts one more). One window for all the activations the store
  // holds: no more than `cap`, the bytes of the offloaded activations around the pass.
  int64_t in_use(bool reads, bool writes, int64_t cap) const {
    const int64_t r = reads ? window_bytes + 2 * block_bytes : 0;
    const int64_t w = writes ? write_behind_bytes() + block_bytes : 0;
    return std::min(cap, r + w);
  }
  // The store's write-behind (TileStoreOptions::write_behind_bytes): one block queued behind the
  // one being written. As deep as the window, it was counted at every pass's peak but hardly
  // used (writes keep up with compute): offloading plans measured 55–70% of their prediction.
  int64_t write_behind_bytes() const { return block_bytes; }
  // Blocks: each forward tile of the producer split into strips as wide as the tile (rows
  // tiles read whole strips) and at most block_bytes, so a tile fills whole blocks.
  Partition blocks(const Analysis& a, NodeId v, const Partition& forward) const;
  // The gradient of segment `s`'s offloaded input while the backward tiles of `part` add into
  // it (in reverse row-major order, as the executor runs them). Its blocks are the cells between
  // the edges of the tiles' input regions, split to the block size: a block is stored after the
  // last tile that adds to it, so only cells where tiles' regions overlap stay open across tiles.
  // Regions are separable per axis (one tile per row and one per column give them all) and grow
  // with the tile index, so the tiles adding to a cell are a contiguous range of rows × columns.
  //
  // Open bytes while tile (r, c) runs: the part of row r's region shared with row r − 1 or r + 1
  // (open from the first of those rows to the last, bounded by the full width), and in row r
  // alone the strip shared by columns c and c + 1 (a column's overlap, the row's height).
  // `every`: all rows and columns (the chosen partition); else the three around the middle,
  // which the budget search can afford for partitions of thousands of tiles.
  static int64_t open_bytes(const Analysis& a, const Segment& s, const Partition& part, bool every);
  // Pixels open at once when tiles whose regions are rows `ny` × columns `nx` (consecutive
  // rows and columns of the partition) add into an activation `width` wide (as above).
  static int64_t strip_bytes(const std::vector<Window>& ny, const std::vector<Window>& nx,
                             int64_t width);
  // The same for the gradients of a segment run as sub-segments while its backward (partition
  // `part`) adds into them: its input's (`input`) and its inner checkpoints' (`inner`). The
  // sub-segments run one after another and a block is stored after each pass's last addition
  // into it, so what is open at once is what one sub-segment adds into: the sum over the leaves
  // it reads, for the worst sub-segment, from the three rows and columns around the middle.
  // (Summing every leaf's worst over all sub-segments counted resnet50's 8192² segments as
  // holding 40 gradients open at once, and the search found only 85×85-tile plans.)
  static int64_t grad_strip_bytes(const Analysis& a, const Segment& s, const Partition& part,
                                  bool input, bool inner);
  // The gradient's blocks: the cells between the tiles' region edges, and the edges of the
  // producer's backward tiles (`reader`, which read the gradient whole blocks at a time), split
  // to the block size.
  Partition grad_blocks(const Analysis& a, const Segment& s, const Partition& part,
                        const Partition& reader) const;

  // Offloaded inner checkpoint `v` of `s`: its value in the cells between the shares of the
  // forward tiles (each written by one) and the regions the backward's sub-segments read of it
  // (the regions they add into its gradient, grad_additions), split to the block size. Blocks
  // of the forward shares alone were read whole by every backward tile meeting them: resnet50
  // at 8192² (5×5 forward, 22×22 backward tiles) read act4's 4 GiB value 6.6 times a step.
  Partition inner_blocks(const Analysis& a, const Segment& s, NodeId v) const;
  // Its gradient: the cells between the regions the backward's passes add (`passes`,
  // grad_additions) and the shares of the backward tiles its sub-segment reads, split to the
  // block size (as grad_blocks). For the input of a segment run as sub-segments (`v` its
  // input): the same cells, with the edges of the producer's backward tiles (`reader`)
  // instead of the shares.
  Partition inner_grad_blocks(const Analysis& a, const Segment& s, NodeId v,
                              const std::vector<std::vector<Region>>& passes,
                              const Partition* reader = nullptr) const;
  // The most bytes of `blocks` open at once during each of the passes of additions `passes`
  // (a block is open from its first addition in a pass to its last, StoredActivation).
  static std::vector<int64_t> open_bytes(const Partition& blocks,
                                         const std::vector<std::vector<Region>>& passes,
                                         int64_t per_pixel);
  // The cells between edges `ey` × `ex` (any order, repeats) of node `v`, split to the block size.
  Partition cells(const Analysis& a, NodeId v, std::vector<int64_t> ey,
                  std::vector<int64_t> ex) const;

  static std::vector<int64_t> subdivide(const std::vector<int64_t>& edges, int64_t side);
};

// The tile store's share of one pass (Offloading::in_use): what it would hold (`demand`),
// bounded by the bytes of the offloaded checkpoints around the pass (`cap`: segments `around`'s
// outputs). A checkpoint's resident blocks never move, so they come out of that bound.
// Its writes (`writes`, part of the demand) are of other bytes (gradients, the pass's output),
// so resident blocks leave them.
struct StoreShare {
  int64_t demand = 0, writes = 0, cap = kUnfit;
  std::vector<size_t> around;
  int64_t resident = 0;  // of the checkpoints around, kept resident so far
  // What it holds with `more` resident bytes of them.
  int64_t held(int64_t more = 0) const {
    return std::max(std::min(cap - resident - more, demand), std::min(writes, cap));
  }
};

// Bytes read back from the tier when `regions` are read in order from an activation stored in
// `blocks` (of which the first `resident` stay resident), `per_pixel` bytes a pixel. A block is
// read whole; one read again before the distinct blocks scheduled in between fill `window`
// bytes is still in memory (the tile store keeps a block whose next read is within the
// window). The other activations read in the same pass share the window, so this counts
// somewhat less than the store moves.
// Blocks flagged in `uniform` (SegmentGlass::uniform_blocks: a checkpoint's glass, kept as one
// vector) are never moved either.
int64_t read_bytes(const std::vector<Region>& regions, const Partition& blocks, int64_t per_pixel,
                   int64_t window, int64_t resident = 0, const std::vector<uint8_t>& uniform = {});

// The regions of node `v` the tiles of `part` over segment `s`'s output read, in the order the
// executor runs them (`reverse`: the backward pass). Tiles flagged in `glass` (SegmentGlass's
// forward or backward) read nothing.
std::vector<Region> tile_reads(const Analysis& a, const Segment& s, const Partition& part, NodeId v,
                               bool reverse, const std::vector<uint8_t>& glass = {});

// Partly resident checkpoints: the budget an offloading plan leaves free in the passes an
// offloaded checkpoint lives through (its segment's forward to the next segment's backward)
// keeps its first blocks resident, so they never move. Lifetimes nest (a later checkpoint lives
// within an earlier one's), so giving the free bytes to the latest checkpoints first loses
// nothing. `passes`: each pass's bytes at its peak (segment i's forward at 2i, backward at
// 2i + 1); the resident blocks are added to their checkpoints. `shares`: the store's in each
// pass; where a checkpoint bounds it, its resident blocks are blocks the store held anyway (the
// window reached over all of it): vgg-mini 8192² in 1 GiB counted maxpool4's 59% resident
// share twice in segments 1 and 2's backward, 70 MiB over the measured peak.
void keep_partly_resident(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes,
                          std::vector<StoreShare>& shares, int64_t budget);

// Bytes a gradient accumulated in `blocks` over `passes` (grad_additions) moves beyond its one
// write: a block stored after one pass is read back and written again in each later pass that
// adds into it.
int64_t reopened_bytes(const Partition& blocks, const std::vector<std::vector<Region>>& passes,
                       int64_t per_pixel);

// The regions of `v` (the input or an inner checkpoint of segment `s`, run as sub-segments)
// that the forward reads, in the executor's order: the statistic pass of the barriers on the
// input, each later inner checkpoint's sub-segment over its shares of the forward tiles, then
// the output's tiles. (The backward reads what grad_additions lists.)
std::vector<Region> forward_reads(const Analysis& a, const Segment& s, NodeId v);

// Bytes moved per step by segment `s`'s offloaded inner checkpoints: each written once, read by
// the later sub-segments' tiles in the forward and the backward (where they add into its
// gradient; its own sub-segment recomputes it for the correction); its gradient written once,
// read by its own sub-segment's shares, and read and written again where a later pass reopens
// a block.
int64_t inner_moved_bytes(const Analysis& a, const Segment& s, int64_t window);

// Bytes moved per step by each offloaded checkpoint: written once, read by the next segment's
// forward and backward tiles (halos, block rounding and the window's reuse included; resident
// blocks never move), its gradient written once and read by this segment's backward tiles.
// Over the request's background, glass tiles read nothing and the blocks forward glass tiles
// write stay out of the store (core/plan/glass.h).
void count_moved_bytes(const Analysis& a, Plan& plan);

// The bytes of segment `s`'s offloaded checkpoint that its forward glass tiles write (`uniform`,
// SegmentGlass::uniform_blocks), less its resident blocks': never stored, never moved.
int64_t uniform_bytes(const Analysis& a, const Segment& s, const std::vector<uint8_t>& uniform);

}  // namespace tessel::core::planning
