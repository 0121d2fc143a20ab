from pipeline.entry import calibrate

calibrate()
