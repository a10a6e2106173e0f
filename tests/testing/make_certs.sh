#!/usr/bin/env bash
# Writes a throwaway PKI for tests into DIR (EC P-256, valid 2 days):
#   ca.crt ca.key               the CA
#   server.crt server.key       signed by it, for localhost and 127.0.0.1
#   fleet.crt fleet.key         signed by it, for the name prepflow-worker only
#   client.crt client.key       signed by it, for client authentication
#   worker-role.crt/.key        signed by it, OU=prepflow-worker, for localhost and
#                               127.0.0.1 (a worker's certificate with its role)
#   job-role.crt/.key           signed by it, OU=prepflow-job, client authentication
#   rogue-ca.crt rogue.crt rogue.key   another CA and a server cert it signed
#   token, wrong-token          bearer tokens
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
curve=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
ca() {  # name subject
  openssl req -x509 "${curve[@]}" -keyout "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2" 2>/dev/null
}
leaf() {  # name ca subject extensions (a subject without a leading / is a CN)
  subject=$3
  [ "${subject:0:1}" = / ] || subject="/CN=$subject"
  openssl req "${curve[@]}" -keyout "$1.key" -out "$1.csr" -subj "$subject" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -out "$1.crt" \
    -days 2 -extfile <(printf '%s\n' "$4") 2>/dev/null
  rm "$1.csr"
}
ca ca "prepflow test CA"
ca rogue-ca "some other CA"
leaf server ca localhost "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf fleet ca prepflow-worker "subjectAltName=DNS:prepflow-worker"
leaf client ca "prepflow trainer" "extendedKeyUsage=clientAuth"
leaf rogue rogue-ca localhost "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf worker-role ca "/OU=prepflow-worker/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf job-role ca "/OU=prepflow-job/CN=a trainer" "extendedKeyUsage=clientAuth"
head -c 24 /dev/urandom | base64 > token
head -c 24 /dev/urandom | base64 > wrong-token
chmod 600 ./*.key
