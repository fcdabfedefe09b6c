"""Speed: throughput, wall time and memory against the alternatives, in the same run."""
