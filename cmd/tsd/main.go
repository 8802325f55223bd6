package main

var version = "dev"

func main() {}
