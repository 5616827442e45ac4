module rebound

go 1.26.0
