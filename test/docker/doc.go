// Package docker tests Canopy's container image and docker-compose.yml as
// an operator runs them: it builds the static binary and the image FROM
// scratch, starts the compose file's three nodes on their private network
// (the init service initializes the cluster), runs bank transfers from the
// Go client against the nodes' container addresses, stops one container and
// checks that transfers go on and that the total balance holds.
//
// It is skipped, saying why, under -short, where no Docker engine answers
// or no docker-compose is installed. Everything it creates (containers,
// network, volumes, image) is named after one random project name and
// removed at the end, failed or not.
package docker
