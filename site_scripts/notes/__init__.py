"""The notes pages: the BF16 notes' numbers, the graph-execution run and its measured round timelines."""
