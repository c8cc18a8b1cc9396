"""What a CI system reads besides the terminal: GitHub Actions workflow commands and step summaries
(``github``), JUnit XML reports (``junit``) and the Markdown both summaries are written in
(``markdown``). Everything here is redacted before it leaves the process, as the terminal is."""
