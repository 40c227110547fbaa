"""The site's pictures: round diagrams drawn from the demos' traces, the benchmark charts, their labels in
both languages and the SVG writer they share. Non-scope: the numbers behind a chart (``performance/``).
"""
