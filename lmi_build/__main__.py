from lmi_build.cli import main

main()
