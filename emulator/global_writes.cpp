#include "emulator/global_writes.h"

#include <algorithm>
#include <utility>

namespace attune::emu {

std::optional<GlobalWrites::Conflict> GlobalWrites::write(std::uint64_t offset, std::uint64_t bytes,
                                                          std::uint32_t writer) {
  if (pages_.empty()) pages_.resize((buffer_bytes_ + kPageBytes - 1) / kPageBytes);
  const std::uint32_t tag = launch_tag(writer);
  std::optional<Conflict> first;
  while (bytes != 0) {  // once: an access of up to 16 aligned bytes stays in its page
    std::unique_ptr<std::uint32_t[]>& page = pages_[offset >> kPageBits];
    if (!page) page = std::make_unique<std::uint32_t[]>(kPageBytes);  // zeros: not written
    const std::uint64_t in_page = offset & (kPageBytes - 1);
    const std::uint64_t n = std::min(bytes, kPageBytes - in_page);
    std::uint32_t* cells = page.get() + in_page;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (cells[i] == writer) continue;  // this block wrote it before
      if (!first && launch_tag(cells[i]) == tag) first = Conflict{offset + i, block(cells[i])};
      cells[i] = writer;
    }
    offset += n;
    bytes -= n;
  }
  return first;
}

std::uint32_t GlobalWrites::writer(std::uint64_t offset) const {
  if (offset >= buffer_bytes_ || pages_.empty()) return 0;
  const auto& page = pages_[offset >> kPageBits];
  return page ? page[offset & (kPageBytes - 1)] : 0;
}

void GlobalWrites::clear() {
  for (auto& page : pages_) {
    if (page) std::fill_n(page.get(), kPageBytes, 0U);
  }
}

const GlobalReductions::Record* GlobalReductions::find(std::uint64_t offset) const {
  if (offset >= buffer_bytes_ || pages_.empty()) return nullptr;
  const auto& page = pages_[offset >> kPageBits];
  if (!page) return nullptr;
  const Record& r = page[(offset >> 2) & (kPageWords - 1)];
  return r.block_record == 0 ? nullptr : &r;
}

GlobalReductions::Record GlobalReductions::exchange(std::uint64_t offset, const Record& r) {
  if (pages_.empty()) pages_.resize((buffer_bytes_ + (std::uint64_t{1} << kPageBits) - 1) >> kPageBits);
  std::unique_ptr<Record[]>& page = pages_[offset >> kPageBits];
  if (!page) page = std::make_unique<Record[]>(kPageWords);
  latest_tag_ = GlobalWrites::launch_tag(r.block_record);
  return std::exchange(page[(offset >> 2) & (kPageWords - 1)], r);
}

void GlobalReductions::clear() {
  pages_.clear();
  latest_tag_ = 0;
}

}  // namespace attune::emu
