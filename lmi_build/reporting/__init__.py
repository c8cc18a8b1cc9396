"""What leaves the process for a person or a pipeline: the terminal and ``--json`` (``output``), the
``--events`` stream (``events``), GitHub Actions workflow commands and step summaries (``github``),
JUnit XML reports (``junit``) and the Markdown both summaries are written in (``markdown``).
Everything here is redacted before it leaves the process."""
