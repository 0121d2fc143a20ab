from pipeline.calibrate.cli import main

main()
