#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  int n=atoi(argv[1]); int size=atoi(argv[2]);
  int l=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(0x7f000001);
  int one=1; setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);
  bind(l,(void*)&a,sizeof a); socklen_t al=sizeof a; getsockname(l,(void*)&a,&al); listen(l,1);
  int c=socket(AF_INET,SOCK_STREAM,0); connect(c,(void*)&a,sizeof a); int s=accept(l,0,0);
  setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,4);
  char *buf=malloc(size), *rb=malloc(65536); memset(buf,'x',size);
  for(int mode=0;mode<6;mode++){
    int m=mode%3; double t0=now();
    for(int i=0;i<n;i++){
      ssize_t w;
      if(m==0){struct iovec v={buf,size}; w=writev(c,&v,1);}
      else if(m==1) w=send(c,buf,size,MSG_NOSIGNAL);
      else w=write(c,buf,size);
      if(w!=size){perror("w");return 1;}
      ssize_t got=0; while(got<size){ssize_t r=recv(s,rb,65536,0); if(r<=0){perror("r");return 1;} got+=r;}
    }
    double t=now()-t0; printf("%s %d bytes: %.0f ns per write+read\n", m==0?"writev":m==1?"send  ":"write ", size, t/n*1e9);
  }
}
