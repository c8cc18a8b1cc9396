"""What a build is made of, below the targets: the settings of a run, the context a target's
``build`` works in, the outcome it reports, and the build half of the target interface."""
