"""gpuGroup symbols <-> device indices, one consistent map per node.

In a scenario, `gpuGroup: g0` names a device without saying which: two tasks with `g0`
on one node share a device, `g1` is another one. The loader gives each node's symbols
device indices in order of first appearance (the first symbol seen on a node is device
0, the next device 1, ...). Expectations bind further symbols to the devices they are
first checked against, and never two symbols to one device. A device that no symbol
names is shown as `#<index>` (`#` starts a YAML comment, so no symbol written unquoted
in a file can look like it).
"""

from __future__ import annotations

__all__ = ["GpuSymbols", "fresh_symbol"]


def fresh_symbol(index: int) -> str:
    return f"#{index}"


class GpuSymbols:
    """Per node: symbol -> device index and back; a bijection on each node."""

    def __init__(self) -> None:
        self._index: dict[str, dict[str, int]] = {}
        self._symbol: dict[str, dict[int, str]] = {}

    def copy(self) -> GpuSymbols:
        other = GpuSymbols()
        other._index = {node: dict(m) for node, m in self._index.items()}
        other._symbol = {node: dict(m) for node, m in self._symbol.items()}
        return other

    def assign(self, node: str, symbol: str) -> int:
        """The device of an input symbol: its earlier index, or the next one on the node."""
        known = self.index_of(node, symbol)
        if known is not None:
            return known
        index = len(self._index.get(node, {}))
        self._link(node, symbol, index)
        return index

    def count(self, node: str) -> int:
        return len(self._index.get(node, {}))

    def symbols(self, node: str) -> list[str]:
        return list(self._index.get(node, {}))

    def index_of(self, node: str, symbol: str) -> int | None:
        return self._index.get(node, {}).get(symbol)

    def symbol_of(self, node: str, index: int) -> str | None:
        return self._symbol.get(node, {}).get(index)

    def bind(self, node: str, symbol: str, index: int) -> bool:
        """Whether `symbol` is device `index` on `node`; an unbound pair gets bound."""
        known = self.index_of(node, symbol)
        if known is not None:
            return known == index
        if self.symbol_of(node, index) is not None:
            return False  # that device already has another symbol
        self._link(node, symbol, index)
        return True

    def name(self, node: str, index: int) -> str:
        """The symbol of a device, or a fresh `#<index>` for a device no one named."""
        symbol = self.symbol_of(node, index)
        if symbol is not None:
            return symbol
        fresh = fresh_symbol(index)
        while self.index_of(node, fresh) is not None:  # only if a file quoted "#n" itself
            fresh += "'"
        return fresh

    def _link(self, node: str, symbol: str, index: int) -> None:
        self._index.setdefault(node, {})[symbol] = index
        self._symbol.setdefault(node, {})[index] = symbol
