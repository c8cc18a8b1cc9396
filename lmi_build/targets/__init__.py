"""Target packages: one per thing lmi-build compiles for (``trtllm``, ``neuronx``, ``hf``).

Each package owns everything about its target (planning, steps, build, layouts, profiles, flag
tables, engine checks, serving compatibility) and exports ``TARGET``. Shared layers reach them
only through ``lmi_build.planning.targets`` by name.
"""
