package main

import "errors"

type upCmd struct{}

func (upCmd) Run() error { return errors.New("not implemented yet") }
