"""What-if analysis of warm capacity: job traces, a seeded trace generator, and (built on them)
the offline optimum, a simulator of the monitor's own policy and a recommendation."""
